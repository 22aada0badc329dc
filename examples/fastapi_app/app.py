"""A FastAPI sign-up: the user's row and its welcome e-mail commit together, or neither does.

`POST /signups` (an `async def` endpoint, `AsyncSession`) and `POST /signups/sync` (a `def`
endpoint FastAPI runs on its thread pool, `Session`) write the user and stage the welcome job
in the same transaction; `GET /jobs/{id}` reads a job from the jobs' store through the client
the lifespan opens and closes. Run it with its worker and relay beside it:

    export DATABASE_URL='postgresql+psycopg://app@db/app'   # the app's tables and its outbox
    export UJOBS_DRIVER="$DATABASE_URL"                     # where the jobs live
    uvicorn --factory examples.fastapi_app.app:create_app
    ujobs worker examples.fastapi_app.jobs --with-relay
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import sqlalchemy as sa
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, model_validator
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from examples.fastapi_app.jobs import send_welcome
from examples.signup import sign_up_fields
from jobs_core import Jobs, driver_from_url
from jobs_core.errors import RecordInvalidError
from jobs_pg import PgOutbox


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"
    # Checked at commit, after the welcome was staged: a taken e-mail rolls back both.
    __table_args__ = (sa.UniqueConstraint("email", deferrable=True, initially="DEFERRED"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str]
    name: Mapped[str]


@dataclass(frozen=True)
class Settings:
    """Where the app's tables and outbox live, and where its jobs do."""

    #: The app's database (SQLAlchemy URL, psycopg driver), holding `users` and the outbox.
    database_url: str
    #: The jobs' store (`ujobs worker --driver`'s URL): read by `GET /jobs/{id}`.
    jobs_url: str
    #: The outbox's schema (`ujobs db upgrade` made it); None: env JOBS_PG_SCHEMA, else ujobs.
    jobs_schema: str | None = None

    @classmethod
    def from_env(cls) -> Settings:
        """DATABASE_URL, UJOBS_DRIVER (default: DATABASE_URL) and JOBS_PG_SCHEMA."""
        database_url = os.environ["DATABASE_URL"]
        return cls(
            database_url,
            os.environ.get("UJOBS_DRIVER", database_url),
            os.environ.get("JOBS_PG_SCHEMA"),
        )


async def db_session(request: Request) -> AsyncIterator[AsyncSession]:
    """The request's session on the app's engine, closed after the response."""
    async with request.app.state.sessions() as session:
        yield session


class SignUp(BaseModel):
    email: str
    name: str

    @model_validator(mode="before")
    @classmethod
    def storable(cls, data: Any) -> Any:
        """Only what the table can hold (`sign_up_fields`): a 422, never the database's 500."""
        return sign_up_fields(data)


class SignedUp(BaseModel):
    user_id: int
    welcome_job_id: str


class JobView(BaseModel):
    id: str
    state: str
    result: Any


def create_app(settings: Settings | None = None) -> FastAPI:
    """The app on `settings` (default: from the environment); its lifespan opens the engines
    and the jobs client, creates the `users` table if missing, and closes them all."""
    settings = settings or Settings.from_env()
    # Stages on the request's own connection: it needs no URL, pool or lifespan of its own.
    outbox = PgOutbox(schema=settings.jobs_schema)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = create_async_engine(settings.database_url)
        sync_engine = sa.create_engine(settings.database_url)
        jobs = Jobs(driver_from_url(settings.jobs_url))
        try:
            await jobs.driver.open()
            async with engine.begin() as conn:
                await conn.run_sync(Base.metadata.create_all)
            app.state.sessions = async_sessionmaker(engine, expire_on_commit=False)
            app.state.sync_sessions = sessionmaker(sync_engine, expire_on_commit=False)
            app.state.jobs = jobs
            yield
        finally:
            await jobs.driver.close()
            await engine.dispose()
            sync_engine.dispose()

    app = FastAPI(lifespan=lifespan)

    @app.exception_handler(RequestValidationError)
    async def refused(request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own answer echoes the input, which may hold what JSON cannot encode (a
        # lone surrogate): that was a 500. Where and why, never the value.
        errors = [{"loc": e.get("loc"), "msg": e.get("msg")} for e in exc.errors()]
        return JSONResponse({"detail": errors}, status_code=422)

    @app.post("/signups", status_code=201)
    async def sign_up(
        body: SignUp, session: Annotated[AsyncSession, Depends(db_session)]
    ) -> SignedUp:
        try:
            async with session.begin():
                user = User(email=body.email, name=body.name)
                session.add(user)
                await session.flush()  # the user's id, for the job's input
                welcome = {"user_id": user.id, "email": user.email}
                staged = await outbox.stage(session, send_welcome, welcome)
        except IntegrityError:
            raise HTTPException(409, "that e-mail is taken") from None
        return SignedUp(user_id=user.id, welcome_job_id=staged.id)

    @app.post("/signups/sync", status_code=201)
    def sign_up_sync(body: SignUp, request: Request) -> SignedUp:
        sessions: sessionmaker[Session] = request.app.state.sync_sessions
        try:
            with sessions.begin() as session:
                user = User(email=body.email, name=body.name)
                session.add(user)
                session.flush()
                welcome = {"user_id": user.id, "email": user.email}
                staged = outbox.stage(session, send_welcome, welcome)
        except IntegrityError:
            raise HTTPException(409, "that e-mail is taken") from None
        return SignedUp(user_id=user.id, welcome_job_id=staged.id)

    @app.get("/jobs/{job_id}")
    async def get_job(job_id: str, request: Request) -> JobView:
        jobs: Jobs = request.app.state.jobs
        try:
            row = (await jobs.driver.job_get_many([job_id])).get(job_id)
        except RecordInvalidError:  # no store holds such an id (a NUL, past 200 bytes)
            row = None
        if row is None:  # a staged job is here once the relay published it
            raise HTTPException(404, "no such job in the jobs' store")
        result = None if row.result_json is None else json.loads(row.result_json)
        return JobView(id=row.id, state=row.state.value, result=result)

    return app
