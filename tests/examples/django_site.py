"""The example Django site, set up in a test process that is not Django's.

Django's settings are the process's: they are made once, from the example's settings module,
and `site_on(schema)` points the default connection at one test's schema the way Django's own
test runner points it at its test database (the connection closed, its settings switched,
closed again after), so the site's tests run beside any others, and again, in one process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import django
from django.conf import settings
from django.core.management import call_command
from django.db import DEFAULT_DB_ALIAS, connections
from django.test import override_settings

from examples.django_app import settings as site
from tests.pg.conftest import PG_URL


def django_set_up() -> None:
    """Django configured from the example's settings module, once per process."""
    if not settings.configured:
        made = {name: getattr(site, name) for name in dir(site) if name.isupper()}
        made["DATABASES"] = {DEFAULT_DB_ALIAS: site.database(PG_URL)}
        settings.configure(**made)
    assert "examples.django_app" in settings.INSTALLED_APPS, "Django was set up for another site"
    django.setup()


@contextlib.contextmanager
def site_on(schema: str) -> Iterator[None]:
    """Inside the block, the site's tables (made as its settings say: `migrate --run-syncdb`)
    and its outbox are those of `schema`."""
    django_set_up()
    conn = connections[DEFAULT_DB_ALIAS]
    before: dict[str, Any] = dict(conn.settings_dict)
    conn.close()
    conn.settings_dict.update(site.database(PG_URL, schema))
    try:
        with override_settings(UJOBS_SCHEMA=schema):
            call_command("migrate", run_syncdb=True, verbosity=0)
            yield
    finally:
        conn.close()
        conn.settings_dict.clear()
        conn.settings_dict.update(before)
