"""The receiver on Flask: `app.add_url_rule("/webhooks/acme", view_func=view(receiver, client),
methods=["POST"])`. The body is read from the WSGI stream under `max_bytes`; the verify and
the enqueue run on the jobs client's own loop (`Jobs.enqueue_sync`'s), so a view needs none."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from flask import Response, request
from werkzeug.exceptions import ClientDisconnected

from jobs_core.errors import WebhookBodyTooLargeError, WebhookRequestInvalidError
from jobs_core.factories.webhooks.receiver import Answer

if TYPE_CHECKING:
    from jobs_core.facade import Jobs
    from jobs_core.factories.webhooks.receiver import WebhookReceiver


def view(
    receiver: WebhookReceiver, client: Jobs | Callable[[], Jobs] | None = None
) -> Callable[[], Response]:
    """A Flask view answering `receiver`'s deliveries, enqueuing on `client` (default: the
    configured one, resolved per request)."""

    def receive() -> Response:
        refused = receiver.precheck(
            request.method,
            request.headers.get("Content-Length"),
            request.headers.get("Content-Type"),
        )
        if refused is not None:
            return respond(refused)
        try:
            body = receiver.read_sync(
                request.stream.read, length=request.headers.get("Content-Length")
            )
        except WebhookBodyTooLargeError as exc:
            return respond(Answer.refusal(413, exc))
        except WebhookRequestInvalidError as exc:
            return respond(Answer.refusal(400, exc))
        except ClientDisconnected:  # Werkzeug's own word for an input cut short
            return respond(Answer.refusal(400, WebhookRequestInvalidError()))
        return respond(receiver.receive_sync(body, dict(request.headers.items()), client))

    receive.__name__ = f"webhook_{receiver.name}"
    return receive


def respond(answer: Answer) -> Response:
    return Response(answer.content(), status=answer.status, mimetype="application/json")
