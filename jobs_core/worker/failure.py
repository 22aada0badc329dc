"""What a failed attempt stores and logs: `last_error`'s JSON (type, message, code, a bounded
traceback), the one-line `brief` of an exception, and `typed` errors for the worker's own."""

from __future__ import annotations

import json
import os
import re
import sys
import traceback
from collections.abc import Sequence

from jobs_core.errors import JobsError
from jobs_core.jsonform import storable
from jobs_core.redact import scrub, secrets_in

#: The most UTF-8 bytes of traceback a `last_error` keeps (the last frames: where it raised).
TRACEBACK_BYTES = 8_192
#: The most characters of an exception's message a `last_error` keeps.
MESSAGE_CHARS = 2_000


def brief(exc: BaseException) -> str:
    """`Type: message` for an exception (`X_CODE: message` for a `JobsError`), bounded."""
    return storable(
        str(exc)[:MESSAGE_CHARS]
        if isinstance(exc, JobsError)
        else f"{type(exc).__name__}: {str(exc)[:MESSAGE_CHARS]}"
    )


def typed(exc: Exception, error: JobsError) -> JobsError:
    """`exc` itself when it is a `JobsError`, else `error` caused by it (traceback kept)."""
    if isinstance(exc, JobsError):
        return exc
    error.__cause__ = exc
    return error


#: A frame's line of a formatted traceback: its file between the quotes.
_FRAME = re.compile(r'^(\s*File ")([^"\n]+)(", line \d+)', re.MULTILINE)


def relative_frames(text: str) -> str:
    """`text` (a formatted traceback) with each frame's file named from the `sys.path` entry
    (or the working directory) it lives under, the longest such: the path a reader finds it at
    (`jobs_core/worker/run.py`, `httpx/_client.py`), not this machine's layout (its home, its
    checkout, its virtualenv). A file under none of them keeps its name."""
    roots = {os.path.abspath(p or os.curdir) for p in (*sys.path, os.getcwd())}
    under = sorted((r.rstrip(os.sep) + os.sep for r in roots if r != os.sep), key=len, reverse=True)

    def shown(m: re.Match[str]) -> str:
        path = m[2]
        root = next((r for r in under if path.startswith(r)), None) if os.path.isabs(path) else None
        return m[1] + (path if root is None else path[len(root) :]) + m[3]

    return _FRAME.sub(shown, text)


def traceback_text(exc: BaseException) -> str | None:
    """The formatted traceback (with its cause chain, frames named by `relative_frames`), its
    last `TRACEBACK_BYTES` kept."""
    if exc.__traceback__ is None and exc.__cause__ is None and exc.__context__ is None:
        return None
    text = storable(relative_frames("".join(traceback.format_exception(exc))))
    raw = text.encode("utf-8")
    if len(raw) <= TRACEBACK_BYTES:
        return text
    marker = "... (earlier frames cut)\n"
    tail = raw[len(raw) - TRACEBACK_BYTES + len(marker) :].decode("utf-8", "ignore")
    # Start at a whole line, so the first frame kept reads as a frame.
    cut = tail.find("\n")
    return marker + (tail[cut + 1 :] if cut >= 0 else tail)


def error_text(exc: BaseException, secrets: Sequence[str] = ()) -> str:
    """`last_error`: JSON with the type, the message, the code of a `JobsError`, and a bounded
    traceback when the error was raised (not for one the worker made, a deadline). The values
    of the input's sensitive fields (`secrets`) and those the error carries (`secrets_in`) are
    scrubbed out: they are never stored. Text no store can hold (a lone surrogate, a NUL) is
    replaced (`storable`): an exception's text never makes its settle unstorable."""
    secrets = secrets_in(exc, secrets)
    message = exc.message if isinstance(exc, JobsError) else str(exc)
    doc: dict[str, str] = {
        "type": type(exc).__name__,
        "message": scrub(storable(message[:MESSAGE_CHARS]), secrets),
    }
    if isinstance(exc, JobsError):
        doc["code"] = exc.code
    tb = traceback_text(exc)
    if tb is not None:
        doc["traceback"] = scrub(tb, secrets)
    return json.dumps(doc, ensure_ascii=False)
