"""The Django example's jobs; `ujobs worker examples.django_app.jobs --with-relay` works them
and publishes what the app staged."""

from __future__ import annotations

from typing import Any

from jobs_core import JobContext, JobRegistry, job

#: This app's jobs alone: the three examples declare the same names and share a test process.
registry = JobRegistry()


@job(
    tenant="none",
    idempotency_key=lambda i: f"welcome:{i['user_id']}",
    queue="emails",
    registry=registry,
)
async def send_welcome(input: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Welcome a new user; a real app calls its mail service here."""
    return {"sent_to": input["email"]}
