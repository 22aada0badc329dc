"""The sign-up view: the member's row and its welcome e-mail commit together, or neither does."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.http import HttpRequest, JsonResponse, UnreadablePostError
from django.views.decorators.http import require_POST

from examples.django_app.jobs import send_welcome
from examples.django_app.models import Member
from examples.signup import sign_up_fields
from jobs_pg import stage


@require_POST
def sign_up(request: HttpRequest) -> JsonResponse:
    try:
        body = read_sign_up(request)
    except UnreadablePostError:  # the client went away mid-body: never a 500
        return JsonResponse({"error": "the request body was cut short"}, status=400)
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    try:
        with transaction.atomic():
            member = Member.objects.create(email=body["email"], name=body["name"])
            welcome = {"user_id": member.id, "email": member.email}
            staged = stage(connection, send_welcome, welcome, schema=settings.UJOBS_SCHEMA)
    except IntegrityError:
        return JsonResponse({"error": "that e-mail is taken"}, status=409)
    return JsonResponse({"user_id": member.id, "welcome_job_id": staged.id}, status=201)


def read_sign_up(request: HttpRequest) -> dict[str, str]:
    """The sign-up's fields (`sign_up_fields`), or ValueError."""
    try:
        body: Any = json.loads(request.body)
    except json.JSONDecodeError:
        raise ValueError("the body is not JSON") from None
    return sign_up_fields(body)
