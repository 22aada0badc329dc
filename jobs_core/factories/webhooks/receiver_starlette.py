"""The receiver on Starlette and FastAPI: `app.router.routes.append(route(receiver, path))` (or
`Starlette(routes=[route(receiver, path)])`). The request's body is streamed under `max_bytes`;
the answer is a small JSON response. The one module of the receiver that imports Starlette: an
app imports it to mount the route, as it imports the dashboard."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from jobs_core.errors import (
    DriverUnavailableError,
    WebhookBodyTooLargeError,
    WebhookRequestInvalidError,
)

if TYPE_CHECKING:
    from jobs_core.facade import Jobs
    from jobs_core.factories.webhooks.receiver import Answer, WebhookReceiver


def route(
    receiver: WebhookReceiver,
    path: str,
    *,
    client: Jobs | Callable[[], Jobs] | None = None,
    name: str | None = None,
) -> Route:
    """A `Route` at `path` answering `receiver`'s deliveries (POST; every other method is
    answered 405 in the same JSON as every refusal), enqueuing on `client` (a `Jobs`, or a
    function answering one, resolved per request; default: the configured one)."""
    from jobs_core.factories.webhooks.receiver import METHODS

    return Route(path, endpoint(receiver, client), methods=list(METHODS), name=name)


def endpoint(
    receiver: WebhookReceiver, client: Jobs | Callable[[], Jobs] | None = None
) -> Callable[[Request], Awaitable[Response]]:
    """`async (request) -> Response` enqueuing on `client` (resolved per request, so a client
    made in the app's lifespan is found)."""
    from jobs_core.factories.webhooks.receiver import Answer, log, resolve_client

    async def receive(request: Request) -> Response:
        try:
            jobs = resolve_client(client)
        except Exception as exc:  # not stored: the sender must retry until the app is fixed
            log.warning("jobs.webhook.no_client: %s: %s", receiver.name, type(exc).__name__)
            return respond(Answer.refusal(503, DriverUnavailableError()))
        return await answer(receiver, request, jobs)

    receive.__name__ = f"webhook_{receiver.name}"
    return receive


async def answer(receiver: WebhookReceiver, request: Request, client: Jobs) -> Response:
    """One request answered: prechecked, read under `max_bytes`, then `receiver.receive`."""
    from jobs_core.factories.webhooks.receiver import Answer

    headers = request.headers
    refused = receiver.precheck(
        request.method, headers.get("content-length"), headers.get("content-type")
    )
    if refused is not None:
        return respond(refused)
    try:
        body = await receiver.read(request.stream(), length=headers.get("content-length"))
    except WebhookBodyTooLargeError as exc:
        return respond(Answer.refusal(413, exc))
    except WebhookRequestInvalidError as exc:
        return respond(Answer.refusal(400, exc))
    except ClientDisconnect:
        return respond(Answer.refusal(400, WebhookRequestInvalidError()))
    return respond(await receiver.receive(body, dict(headers.items()), client))


def respond(answer: Answer) -> Response:
    return Response(answer.content(), status_code=answer.status, media_type="application/json")
