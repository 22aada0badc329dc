"""What a job waits for, and what its recorded sleeps and waits were, in words: the CLI and the
dashboard both render these sentences, each with its own clock (`At` is an instant the
renderer shows in its reader's zone, with its age).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from jobs_core.jsonform import JsonValue
from jobs_core.operator.service import JobView, StepView
from jobs_core.states import JobState
from jobs_core.steps.api import WAIT


@dataclass(frozen=True, slots=True)
class At:
    """An instant inside a sentence, in epoch ms."""

    ms: int


#: A sentence: text and instants, in reading order.
Said = tuple[str | At, ...]


def _compact(value: JsonValue) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def waits_for(view: JobView, now_ms: int) -> Said | None:
    """What the row waits for now, in words; None for a row that waits for nothing (running or
    finished). A parked row's event match is shown as redacted as its view holds it."""
    r = view.record
    if r.state is JobState.PARKED:
        if r.wait is not None:
            w = r.wait
            head: Said = (
                f"event {w.event!r} matching {_compact(view.wait_match)} published since ",
                At(w.since_ms),
            )
            end: Said = (", until ", At(w.until_ms)) if w.until_ms is not None else (", no end",)
            look: Said = (
                ("; looks again at ", At(r.run_at_ms))
                if r.run_at_ms is not None and r.run_at_ms != w.until_ms
                else ()
            )
            return head + end + look
        if r.join is not None and r.join.pending:
            head = (f"{r.join.pending} of {r.join.total} jobs it joined to finish",)
            return head + ((", at the latest until ", At(r.run_at_ms)) if r.run_at_ms else ())
        if r.run_at_ms is not None:
            return ("sleeping until ", At(r.run_at_ms))
        return ("an event or its jobs (nothing stored says which)",)
    if r.state is JobState.READY and r.run_at_ms is not None:
        if r.run_at_ms <= now_ms:
            return ("a free worker: due since ", At(r.run_at_ms))
        if r.attempt == 0 and r.last_error is None:
            return ("its time: scheduled for ", At(r.run_at_ms))
        return (f"its next attempt (after attempt {r.attempt}): at ", At(r.run_at_ms))
    return None


def step_said(step: StepView, steps: Sequence[StepView]) -> Said | None:
    """A recorded step that is a sleep or a wait, in words; None for any other step (its output
    is shown as it is). `steps` are the run's steps, to tell a wait's end from a plain step."""
    out = step.output
    if step.name.startswith(WAIT) and isinstance(out, dict) and "event" in out:
        since = out.get("since")
        deadline = out.get("deadline")
        head: Said = (
            f"began waiting for event {out['event']!r} matching {_compact(out.get('match'))}",
        )
        if isinstance(since, int):
            head += (" published since ", At(since))
        return head + ((", until ", At(deadline)) if isinstance(deadline, int) else (", no end",))
    waited = any(s.name == f"{WAIT}{step.name}" for s in steps)
    if waited and isinstance(out, dict):
        if out.get("timeout") is True:
            return ("the wait ended at its deadline: no event came",)
        if "event_id" in out:
            return (f"event {out['event_id']} came: {_compact(out.get('data'))}",)
    if isinstance(out, dict) and set(out) == {"until"} and isinstance(out["until"], int):
        return ("slept until ", At(out["until"]))
    return None
