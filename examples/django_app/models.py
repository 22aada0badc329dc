"""The example site's one table."""

from __future__ import annotations

from django.db import models


class Member(models.Model):
    email = models.CharField(max_length=254)
    name = models.CharField(max_length=200)

    class Meta:
        db_table = "members"
        constraints = [  # noqa: RUF012 - Django's Meta convention; Django only reads it
            # Checked at commit, after the welcome was staged: a taken e-mail rolls back both.
            models.UniqueConstraint(
                fields=["email"], name="members_email_key", deferrable=models.Deferrable.DEFERRED
            ),
        ]
