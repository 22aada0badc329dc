"""Instants on the dashboard's pages, in the VIEWER's zone: each is a `<time>` holding the UTC
instant (ISO 8601) and the server's rendering of it; `static/dashboard.js` rewrites the text
(`data-local`) or the tooltip (`data-title`) in the browser's own zone. Without the script a
page still reads, in the server's zone with its offset.
"""

from __future__ import annotations

from markupsafe import Markup, escape

from jobs_core.operator.times import iso_utc, local, relative
from jobs_core.operator.waits import At, Said
from jobs_core.visible import spelled


def at_html(ms: int) -> Markup:
    """`ms` as local time (the viewer's, once the script ran)."""
    return Markup('<time datetime="{}" data-local>{}</time>').format(iso_utc(ms), local(ms))


def when_html(ms: int | None, now_ms: int) -> Markup:
    """`ms` in local time with its age (`2026-12-06 10:07:09 +0100 (in 5 s)`), or `-`."""
    if ms is None:
        return Markup("-")
    return at_html(ms) + Markup(" ({})").format(relative(ms, now_ms))


def ago_html(ms: int, now_ms: int) -> Markup:
    """`ms` as its age (`3 min ago`), its local time in the tooltip."""
    return Markup('<time datetime="{}" data-title title="{}">{}</time>').format(
        iso_utc(ms), local(ms), relative(ms, now_ms)
    )


def said_html(said: Said, now_ms: int) -> Markup:
    """A sentence of `jobs_core.operator.waits`: its text (event and step names, ids) spelled
    as every stored text on a page is, then escaped; its instants as `when_html`."""
    return Markup("").join(
        when_html(s.ms, now_ms) if isinstance(s, At) else escape(spelled(s)) for s in said
    )
