"""A Flask sign-up: the user's row and its welcome e-mail commit together, or neither does.

`POST /signups` writes the user and stages the welcome job in one SQLAlchemy `Session`
transaction. `POST /users/<id>/welcome` sends the welcome again: no write has to commit with
it, so it is enqueued straight away with `enqueue_sync` (deduped while one is live). Run it
with its worker and relay beside it:

    export DATABASE_URL='postgresql+psycopg://app@db/app'   # the app's tables and its outbox
    export UJOBS_DRIVER="$DATABASE_URL"                     # where the jobs live
    flask --app examples.flask_app.app run
    ujobs worker examples.flask_app.jobs --with-relay
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from flask import Flask, request
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

import jobs_core
from examples.flask_app.jobs import send_welcome
from examples.signup import sign_up_fields
from jobs_pg import PgOutbox

Answer = tuple[dict[str, Any], int]


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"
    # Checked at commit, after the welcome was staged: a taken e-mail rolls back both.
    __table_args__ = (sa.UniqueConstraint("email", deferrable=True, initially="DEFERRED"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str]
    name: Mapped[str]


def create_app(config: Mapping[str, Any] | None = None) -> Flask:
    """The app on `config`, over what the environment says: `DATABASE_URL` (its tables and
    outbox), `UJOBS_DRIVER` (its jobs' store; default DATABASE_URL), `JOBS_PG_SCHEMA` (the
    outbox's schema; default ujobs). Creates the `users` table if missing and configures the
    jobs client that `enqueue_sync` uses; `app.extensions` holds the engine and that client."""
    app = Flask(__name__)
    database_url = os.environ.get("DATABASE_URL")
    app.config.from_mapping(
        DATABASE_URL=database_url,
        UJOBS_DRIVER=os.environ.get("UJOBS_DRIVER", database_url),
        JOBS_PG_SCHEMA=os.environ.get("JOBS_PG_SCHEMA"),
    )
    app.config.update(config or {})
    engine = sa.create_engine(app.config["DATABASE_URL"])
    Base.metadata.create_all(engine)
    sessions = sessionmaker(engine, expire_on_commit=False)
    # Stages on the view's own session: it needs no URL or pool of its own.
    outbox = PgOutbox(schema=app.config["JOBS_PG_SCHEMA"])
    app.extensions["engine"] = engine
    app.extensions["jobs"] = jobs_core.configure(app.config["UJOBS_DRIVER"])

    @app.post("/signups")
    def sign_up() -> Answer:
        try:
            body = sign_up_fields(request.get_json(silent=True))
        except ValueError as exc:
            return {"error": str(exc)}, 400
        try:
            with sessions.begin() as session:
                user = User(email=body["email"], name=body["name"])
                session.add(user)
                session.flush()  # the user's id, for the job's input
                welcome = {"user_id": user.id, "email": user.email}
                staged = outbox.stage(session, send_welcome, welcome)
        except IntegrityError:
            return {"error": "that e-mail is taken"}, 409
        return {"user_id": user.id, "welcome_job_id": staged.id}, 201

    @app.post("/users/<int:user_id>/welcome")
    def send_welcome_again(user_id: int) -> Answer:
        if user_id > 2**31 - 1:  # past the id column: no such user (the database would refuse)
            return {"error": "no such user"}, 404
        with Session(engine) as session:
            user = session.get(User, user_id)
        if user is None:
            return {"error": "no such user"}, 404
        sent = send_welcome.enqueue_sync({"user_id": user.id, "email": user.email})
        return {"job_id": sent.id, "deduped": sent.deduped}, 202

    return app
