"""What an attempt keeps of a settle's error: bounded, storable, and the same text for every
store (`jobs_core.attempts`)."""

from __future__ import annotations

import json

import pytest

from jobs_core.attempts import (
    ATTEMPT_MESSAGE_CHARS,
    ATTEMPT_TRACEBACK_BYTES,
    NO_ERROR,
    AttemptOutcome,
    attempt_error,
    entry_json,
    from_entry,
    tail_json,
)
from jobs_core.jsonform import unstorable, utf8_length
from jobs_core.worker.failure import error_text


def _boom() -> None:
    raise ValueError("no <b>stock</b> for \ud800 item\x00 7")


def test_a_workers_last_error_becomes_code_message_and_the_end_of_its_traceback() -> None:
    try:
        _boom()
    except ValueError as exc:
        code, message, tb = attempt_error(error_text(exc))
    assert code == "ValueError"
    assert message == "no <b>stock</b> for \ufffd item\\0 7"
    assert tb is not None and tb.rstrip().endswith("item\\0 7") and "_boom" in tb


@pytest.mark.parametrize(
    "error",
    [
        json.dumps({"code": "X\u0000\ud83d", "message": "m" * 10_000, "traceback": "é" * 9_999}),
        '{"a":' * 10_000 + "1" + "}" * 10_000,
        "[" * 10_000,
        '{"message": 5, "traceback": ["x"]}',
        "plain\ntext\x01 " + "😀" * 3_000,
        "",
    ],
    ids=["escapes-and-sizes", "deep-object", "deep-array", "wrong-types", "plain", "empty"],
)
def test_whatever_the_error_holds_every_part_is_bounded_and_storable(error: str) -> None:
    parts = attempt_error(error)
    for text in parts:
        assert text is None or unstorable(text) is None, text
    _, message, tb = parts
    assert message is None or len(message) <= ATTEMPT_MESSAGE_CHARS
    assert tb is None or utf8_length(tb) <= ATTEMPT_TRACEBACK_BYTES
    # What Redis appends as text: compact JSON members, no NUL and no raw newline.
    tail = tail_json(AttemptOutcome.RETRIED, parts)
    assert "\n" not in tail and "\x00" not in tail
    doc = {
        **entry_json(2, 3, "w", 10, 20, AttemptOutcome.RETRIED, NO_ERROR),
        **json.loads("{" + tail + "}"),
    }
    record = from_entry(doc)
    assert (record.error_code, record.error_message, record.traceback) == parts
