"""Redaction: a job's sensitive input fields are never shown — not by the CLI, the logs, the
stored errors, the metrics or any JSON form.

A job declares its sensitive fields (`job(sensitive=("card", "password"))`). A field name masks
that key at ANY depth of the input (in nested objects and in objects inside arrays), so a
declaration does not have to follow the input's shape. What a view shows of a row is decided by
the declarations it can see — the live workers' (each announces its jobs' sensitive fields in
its registry row) and any the caller passes (`--app MODULE`): a job name that nobody declares
any more is shown as `[redacted]` WHOLE, since nothing says which of its fields are safe (fail
closed). Result and progress values are masked by the same field names, and any text (a stored
error, a log line) has the VALUES of the input's sensitive fields scrubbed out.

An error is scrubbed by ONE rule wherever it is recorded (a stored `last_error`, a log line, a
span event): the secrets of the run it is about, plus those it carries itself (`carry`) — an
error a declaration function raised on some other input (a child job's key, a task's input)
carries that input's secrets, so whoever records it scrubs them without knowing the job.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from jobs_core.jsonform import JsonValue, holds_surrogate, storable
from jobs_core.records import WorkerInfo

#: What a hidden value (or a whole hidden input) shows instead.
REDACTED: Final = "[redacted]"
#: Values shorter than this are not scrubbed out of free text: "1" or "no" would scrub every
#: digit and word of a traceback and hide more than it protects.
MIN_SCRUB_CHARS: Final = 4
# -- redaction hints: what a person reading a hidden value is told (never in JSON forms) --
#: What a value hidden WHOLE (no declaration of its job is known) shows in a human view.
UNDECLARED_HINT: Final = (
    "[redacted: no live worker declares this job; pass --app MODULE (or UJOBS_APP) to show it]"
)
#: The line under a value where a declared sensitive field shows `[redacted]`.
SENSITIVE_HINT: Final = (
    "[redacted] marks a field this job declares sensitive: it is never shown, --app or not"
)


def mask(value: JsonValue, fields: frozenset[str]) -> JsonValue:
    """`value` with every object key in `fields`, at any depth, showing `[redacted]`."""
    if not fields:
        return value
    if isinstance(value, dict):
        return {k: REDACTED if k in fields else mask(v, fields) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v, fields) for v in value]
    return value


def secrets_of(value: JsonValue, fields: frozenset[str]) -> list[str]:
    """The texts of every value under a key in `fields` (numbers as written), longest first."""
    found: set[str] = set()

    def walk(v: JsonValue, hidden: bool) -> None:
        if isinstance(v, dict):
            for k, child in v.items():
                walk(child, hidden or k in fields)
        elif isinstance(v, list):
            for child in v:
                walk(child, hidden)
        elif hidden and v is not None and not isinstance(v, bool):
            text = v if isinstance(v, str) else json.dumps(v)
            if len(text) >= MIN_SCRUB_CHARS:
                found.add(text)

    if fields:
        walk(value, False)
    return sorted(found, key=_longest_first)


def input_secrets(input_json: str, fields: frozenset[str]) -> list[str]:
    """`secrets_of` a stored input (JSON text); none when no field is sensitive or the text
    does not decode (nothing in it is known to be secret)."""
    if not fields:
        return []
    try:
        value: JsonValue = json.loads(input_json)
    except ValueError:
        return []
    return secrets_of(value, fields)


#: The attribute an exception keeps the secrets it may hold in (`carry`).
_CARRIED: Final = "__ujobs_secrets__"


def carry(exc: BaseException, secrets: Sequence[str]) -> BaseException:
    """Mark `exc` as possibly holding `secrets` (its message, its cause's): every record of it
    (`secrets_in`) scrubs them. Answers `exc`."""
    if secrets:
        held: tuple[str, ...] = getattr(exc, _CARRIED, ())
        with contextlib.suppress(AttributeError):  # an exception type without a __dict__
            setattr(exc, _CARRIED, (*held, *secrets))
    return exc


def secrets_in(exc: BaseException | None, secrets: Sequence[str] = ()) -> list[str]:
    """The secrets a record of `exc` must scrub: `secrets` (the run's) and every secret `exc`,
    its causes and contexts carry, longest first."""
    found = set(secrets)
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        found.update(getattr(exc, _CARRIED, ()))
        exc = exc.__cause__ or exc.__context__
    return sorted(found, key=_longest_first)


def _longest_first(secret: str) -> tuple[int, str]:
    return (-len(secret), secret)


def scrub(text: str, secrets: Sequence[str]) -> str:
    """`text` with every occurrence of each secret replaced by `[redacted]` (longest first, so
    a secret holding another is replaced whole)."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def scrub_value(value: JsonValue, secrets: Sequence[str]) -> JsonValue:
    """`value` with each secret scrubbed out of its strings, and a number that IS a secret
    replaced by `[redacted]` (object keys are left as they are)."""
    if not secrets:
        return value
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, dict):
        return {k: scrub_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_value(v, secrets) for v in value]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return REDACTED if json.dumps(value) in secrets else value
    return value


@dataclass(frozen=True, slots=True)
class RedactionPolicy:
    """Which input fields each job name hides. A name absent from `declared` is hidden whole."""

    declared: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @staticmethod
    def of(pairs: Iterable[tuple[str, Iterable[str]]]) -> RedactionPolicy:
        """A policy from (job name, sensitive fields) pairs; a name given twice hides the union."""
        out: dict[str, frozenset[str]] = {}
        for name, fields in pairs:
            out[name] = out.get(name, frozenset()) | frozenset(fields)
        return RedactionPolicy(out)

    @staticmethod
    def from_workers(workers: Sequence[WorkerInfo]) -> RedactionPolicy:
        """What the live workers declare (`jobs` in their registry row); a row that says nothing
        readable declares nothing."""
        pairs: list[tuple[str, Iterable[str]]] = []
        for w in workers:
            try:
                info = json.loads(w.info_json)
            except ValueError:
                continue
            jobs = info.get("jobs") if isinstance(info, dict) else None
            if not isinstance(jobs, dict):
                continue
            for name, spec in jobs.items():
                fields = spec.get("sensitive") if isinstance(spec, dict) else None
                if isinstance(name, str) and isinstance(fields, list):
                    pairs.append((name, [f for f in fields if isinstance(f, str)]))
        return RedactionPolicy.of(pairs)

    def merged(self, other: RedactionPolicy) -> RedactionPolicy:
        return RedactionPolicy.of([*self.declared.items(), *other.declared.items()])

    def knows(self, name: str) -> bool:
        return name in self.declared

    def input(self, name: str, input_json: str) -> JsonValue:
        """The input as it may be shown: masked, or `[redacted]` whole for an undeclared name."""
        fields = self.declared.get(name)
        if fields is None:
            return REDACTED
        value: JsonValue = json.loads(input_json)
        return mask(value, fields)

    def value(self, name: str, text: str | None, input_json: str) -> JsonValue:
        """A stored result or progress value as it may be shown (None stays None): masked by the
        name's fields and scrubbed of its input's secrets; `[redacted]` for an undeclared name."""
        if text is None:
            return None
        fields = self.declared.get(name)
        if fields is None:
            return REDACTED
        value: JsonValue = json.loads(text)
        return mask(scrub_value(value, self.secrets(name, input_json)), fields)

    def text(self, name: str, text: str | None, input_json: str) -> str | None:
        """Free text about a run (a stored error): the input's secrets scrubbed out. An
        undeclared name's error is shown as is: it may name the failure, and no field of an
        undeclared input is known to be secret — the worker already scrubbed it when it
        stored it (see `jobs_core.worker.failure`)."""
        if text is None:
            return None
        return scrub(text, self.secrets(name, input_json))

    def secrets(self, name: str, input_json: str) -> list[str]:
        return input_secrets(input_json, self.declared.get(name, frozenset()))

    # -- acts-for --
    def org(self, name: str, acts_for: str | None, input_json: str | None) -> str | None:
        """The org a row acts for as it may be shown (None stays None). It was derived from the
        input, so it fails closed as the input does: `[redacted]` for an undeclared name, or
        when it is one of the input's secrets (`input_json` None: not read, so not known to be
        none of them — pass it whenever the name declares a sensitive field)."""
        if acts_for is None:
            return None
        fields = self.declared.get(name)
        if fields is None:
            return REDACTED
        if fields and (input_json is None or _is_secret(acts_for, input_json, fields)):
            return REDACTED
        return acts_for

    def needs_input_for_org(self, name: str) -> bool:
        """Whether `org` must read the row's input to show its org (the name hides fields)."""
        return bool(self.declared.get(name))


def _is_secret(text: str, input_json: str, fields: frozenset[str]) -> bool:
    """Whether `text` is the value of a sensitive field of the input, however short (an org
    is shown alone, so no length makes it safe); an input that does not decode: yes."""
    try:
        value: JsonValue = json.loads(input_json)
    except ValueError:
        return True
    stack: list[tuple[JsonValue, bool]] = [(value, False)]
    while stack:
        v, hidden = stack.pop()
        if isinstance(v, dict):
            stack += [(child, hidden or k in fields) for k, child in v.items()]
        elif isinstance(v, list):
            stack += [(child, hidden) for child in v]
        elif hidden and (v == text or (not isinstance(v, str) and json.dumps(v) == text)):
            return True
    return False


#: The `extra` key a log call sets to the secrets its record must not print (`ScrubFilter`).
SCRUB_EXTRA: Final = "_scrub"


class ScrubFilter(logging.Filter):
    """Scrubs the secrets a record carries (`extra={SCRUB_EXTRA: secrets}`, and those its
    exceptions carry — in `exc_info` or among its arguments, `secrets_in`) out of its message
    and its formatted traceback, before any handler formats it; and replaces a lone surrogate
    there (an exception's text can hold one) with U+FFFD, so every UTF-8 sink can write it.

    The traceback is formatted here once and kept in `exc_text`, which formatters print instead
    of formatting `exc_info` again, so an exception message holding a card number is printed
    scrubbed too. Installed on the `jobs` logger (by this module), whose records the worker
    and the scheduler write.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        secrets: Sequence[str] = getattr(record, SCRUB_EXTRA, None) or ()
        args = record.args if isinstance(record.args, tuple) else ()
        for error in (record.exc_info[1] if record.exc_info else None, *args):
            if isinstance(error, BaseException):
                secrets = secrets_in(error, secrets)
        message = record.getMessage()
        if secrets or holds_surrogate(message):
            record.msg = _writable(message, secrets)
            record.args = None
        if record.exc_info and not record.exc_text:
            formatted = logging.Formatter().formatException(record.exc_info)
            record.exc_text = _writable(formatted, secrets)
        return True


def _writable(text: str, secrets: Sequence[str]) -> str:
    return storable(scrub(text, secrets)) if secrets else storable(text)


_jobs_log = logging.getLogger("jobs")
if not any(isinstance(f, ScrubFilter) for f in _jobs_log.filters):
    _jobs_log.addFilter(ScrubFilter())
