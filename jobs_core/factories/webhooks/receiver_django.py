"""The receiver on Django: `path("webhooks/acme", view(receiver, client))` in a URLconf. The view
is exempt from CSRF (a webhook is signed, not a form of the site's), reads the body from the
request stream under `max_bytes` (never `request.body`), and runs the verify and the enqueue on
the jobs client's own loop (`Jobs.enqueue_sync`'s)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.http import HttpResponse
from django.views.decorators.csrf import csrf_exempt

from jobs_core.errors import WebhookBodyTooLargeError, WebhookRequestInvalidError
from jobs_core.factories.webhooks.receiver import Answer

if TYPE_CHECKING:
    from jobs_core.facade import Jobs
    from jobs_core.factories.webhooks.receiver import WebhookReceiver


def view(
    receiver: WebhookReceiver, client: Jobs | Callable[[], Jobs] | None = None
) -> Callable[[Any], Any]:
    """A Django view answering `receiver`'s deliveries, enqueuing on `client` (default: the
    configured one, resolved per request)."""

    def receive(request: Any) -> Any:
        refused = receiver.precheck(
            request.method or "",
            request.headers.get("Content-Length"),
            request.headers.get("Content-Type"),
        )
        if refused is not None:
            return respond(refused)
        try:
            body = receiver.read_sync(request.read, length=request.headers.get("Content-Length"))
        except WebhookBodyTooLargeError as exc:
            return respond(Answer.refusal(413, exc))
        except WebhookRequestInvalidError as exc:
            return respond(Answer.refusal(400, exc))
        return respond(receiver.receive_sync(body, dict(request.headers.items()), client))

    receive.__name__ = f"webhook_{receiver.name}"
    exempt: Callable[[Any], Any] = csrf_exempt(receive)
    return exempt


def respond(answer: Answer) -> Any:
    return HttpResponse(answer.content(), status=answer.status, content_type="application/json")
