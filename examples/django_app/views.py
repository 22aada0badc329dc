"""The sign-up view: the member's row and its welcome e-mail commit together, or neither does."""

from __future__ import annotations

import json

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from examples.django_app.jobs import send_welcome
from examples.django_app.models import Member
from jobs_pg import stage


@require_POST
def sign_up(request: HttpRequest) -> JsonResponse:
    body = json.loads(request.body)
    try:
        with transaction.atomic():
            member = Member.objects.create(email=body["email"], name=body["name"])
            welcome = {"user_id": member.id, "email": member.email}
            staged = stage(connection, send_welcome, welcome, schema=settings.UJOBS_SCHEMA)
    except IntegrityError:
        return JsonResponse({"error": "that e-mail is taken"}, status=409)
    return JsonResponse({"user_id": member.id, "welcome_job_id": staged.id}, status=201)
