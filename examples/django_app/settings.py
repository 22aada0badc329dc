"""The example site's settings, from the environment. Run it with its worker and relay beside it:

    export DATABASE_URL='postgresql://app@db/app'   # the site's tables and its outbox
    export UJOBS_DRIVER="$DATABASE_URL"             # where the jobs live
    export DJANGO_SETTINGS_MODULE=examples.django_app.settings
    django-admin migrate --run-syncdb               # the `members` table
    django-admin runserver
    ujobs worker examples.django_app.jobs --with-relay

`APP_SCHEMA` puts the site's tables in that schema (first on the search path); `JOBS_PG_SCHEMA`
names the outbox's schema (`ujobs db upgrade` made it; default ujobs).
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import unquote, urlsplit


def database(url: str, schema: str | None = None) -> dict[str, Any]:
    """Django's settings for the Postgres at `url` (`postgresql://` or SQLAlchemy's
    `postgresql+psycopg://`), with `schema` alone on the search path when given."""
    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "OPTIONS": {"options": f"-c search_path={schema}"} if schema else {},
    }


DATABASES = {
    "default": database(
        os.environ.get("DATABASE_URL", "postgresql://postgres@localhost/postgres"),
        os.environ.get("APP_SCHEMA"),
    )
}
#: The outbox's schema, for `jobs_pg.stage`; None: env JOBS_PG_SCHEMA, else ujobs.
UJOBS_SCHEMA = os.environ.get("JOBS_PG_SCHEMA")

INSTALLED_APPS = ["examples.django_app"]
ROOT_URLCONF = "examples.django_app.urls"
MIDDLEWARE: list[str] = []
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "an example's key: set your own")
DEBUG = False
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,testserver").split(",")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
