"""The task family's rules: tasks armed (again, later, or by a scheduler whose clock lags),
occurrences fired under the watermark the firer read, a stale one, one nobody read, or on a
task never armed; catch-up fires whose watermark runs past their occurrence; fires whose job
names a stored row's id or collides with a live row's key; a rival scheduler firing the same
watermark again; task pauses beside claims of jobs of the same name; refused calls. Every
mark is compared after each step. Only runs when the driver declares `tasks` in
`capabilities()`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from jobs_core.driver import MAX_TASK_BATCH
from jobs_core.errors import JobsError
from jobs_core.records import (
    ClaimParams,
    ClaimResult,
    NewJob,
    Pause,
    TaskFire,
    TaskFireAnswer,
    TaskMark,
)
from jobs_core.states import LIVE_STATES
from jobs_core.testing.compare import Check
from jobs_core.testing.machine import (
    QUEUES,
    TASK_NAMES,
    WORKERS,
    IdSpec,
    JobSpec,
    ParityMachine,
    batch_job_specs,
    recent,
)

#: A task no rule ever arms: fires on it must be refused and leave no mark.
UNARMED_TASK = "never-armed"
#: Where a fire's expected watermark comes from. `current`: the stored one (the fire lands);
#: `stale`: one this task had earlier (a scheduler that read before another fired); `ahead`: one
#: nobody read; `unarmed`: `UNARMED_TASK`'s.
EXPECTS = ("current", "current", "current", "stale", "stale", "ahead", "unarmed")
#: What the fired job is: a record of the pools; the scheduler's own (named after the task,
#: keyed by the occurrence); a twin of a live row (deduped to it by key); a stored row's id.
FIRE_JOBS = ("spec", "spec", "occurrence", "live key", "live key", "old id")
#: Calls the ABC refuses before any write.
TASK_REFUSALS = (
    "names twice",
    "names as a string",
    "empty name",
    "too many names",
    "occurrence at the watermark",
    "watermark before the occurrence",
    "bad job",
)


class TaskRules(ParityMachine):
    """The task family, beside the job family's rows."""

    FAMILY = "tasks"

    def __init__(self) -> None:
        super().__init__()
        #: Every watermark each task was answered with, oldest first: the stale expects.
        self._watermarks: dict[str, list[int]] = {}

    def _seen(self, marks: object) -> None:
        """Remember the watermarks in an answer (a mark, a list or a dict of marks)."""
        if isinstance(marks, TaskFireAnswer):
            marks = marks.mark
        if isinstance(marks, dict):
            marks = list(marks.values())
        for m in marks if isinstance(marks, list) else [marks]:
            if isinstance(m, TaskMark):
                seen = self._watermarks.setdefault(m.name, [])
                if m.watermark_ms not in seen:
                    seen.append(m.watermark_ms)

    def _arm(self, names: list[str], now_ms: int) -> object:
        got = self._both(
            "task_arm",
            functools.partial(self.model.task_arm, names, now_ms),
            functools.partial(self.driver.task_arm, names, now_ms),
        )
        self._seen(got)
        return got

    @precondition(lambda self: self.capabilities.tasks)
    @rule(
        op=st.sampled_from(("arm", "arm", "marks", "refused", "pause", "pause")),
        names=st.lists(
            st.sampled_from((*TASK_NAMES, UNARMED_TASK)), min_size=0, max_size=3, unique=True
        ),
        back=st.sampled_from((0, 0, 0, 1, 60_000)),
        refusal=st.sampled_from(TASK_REFUSALS),
        name=st.sampled_from(TASK_NAMES),
        add=st.sampled_from((True, True, False)),
        claim=st.sampled_from((True, True, False)),
    )
    def task(
        self,
        op: str,
        names: list[str],
        back: int,
        refusal: str,
        name: str,
        add: bool,
        claim: bool,
    ) -> None:
        """Every task call but the fire, in one rule (so the walk keeps its steps for the other
        families): arm, read marks, a refused call, or a task pause."""
        if op == "arm":
            self._task_arm([n for n in names if n != UNARMED_TASK] or [name], back)
        elif op == "marks" or (op == "pause" and not self.capabilities.pauses):
            self._task_marks(names)
        elif op == "refused":
            self._task_refused(refusal, name)
        else:
            self._task_pause(name, add, claim)

    def _task_arm(self, names: list[str], back: int) -> None:
        """Arm tasks, at now or by a scheduler whose clock lags `back` ms: an armed task keeps
        its watermark (later, earlier or equal to that now), a new one starts at that now."""
        if any(n in self.model.marks for n in names):
            self._note("task armed again")
        self._arm(names, self.now - back)

    @precondition(lambda self: self.capabilities.tasks)
    @rule(
        name=st.sampled_from((*TASK_NAMES[:3], *TASK_NAMES)),
        expect=st.sampled_from(EXPECTS),
        step=st.sampled_from((1, 1000, 60_000)),
        span=st.sampled_from((0, 0, 0, 1, 180_000)),
        job=st.sampled_from(FIRE_JOBS),
        spec=batch_job_specs,
        pick=recent,
        rival=st.sampled_from((False, False, True)),
    )
    def task_fire(
        self,
        name: str,
        expect: str,
        step: int,
        span: int,
        job: str,
        spec: JobSpec,
        pick: int,
        rival: bool,
    ) -> None:
        """Fire the occurrence `step` ms after the expected watermark, moving the watermark
        `span` ms past it (a catch-up over missed occurrences); with `rival`, a second scheduler
        then fires the same watermark with its own job (the fence lets one through)."""
        if expect == "unarmed":
            name = UNARMED_TASK
        elif name not in self.model.marks:
            self._arm([name], self.now)
        stored = self.model.marks.get(name)
        current = stored.watermark_ms if stored is not None else self.now
        if expect == "stale":
            earlier = [w for w in self._watermarks.get(name, []) if w != current]
            expect_ms = earlier[-1 - pick % len(earlier)] if earlier else current - 1
        elif expect == "ahead":
            expect_ms = current + 1
        else:
            expect_ms = current
        occurrence = expect_ms + step
        fire = TaskFire(
            name=name,
            expect_ms=expect_ms,
            occurrence_ms=occurrence,
            watermark_ms=occurrence + span,
            job=self._fire_job(job, spec, name, occurrence, pick),
            now_ms=self.now,
        )
        got = self._fire(fire, expect)
        if rival and isinstance(got, TaskFireAnswer):
            # Another scheduler read the same watermark: its own record, under a key of its own.
            self._serial += 1
            other = replace(
                self._new_job(replace(spec, id=IdSpec("new", 0, "r")), {}),
                idempotency_key=f"rival-{self._serial}",
            )
            self._fire(replace(fire, job=other), "rival")

    def _fire_job(self, kind: str, spec: JobSpec, name: str, occurrence: int, pick: int) -> NewJob:
        if kind == "occurrence":
            spec = replace(spec, name=name, tenant_id=None, key=f"task@{occurrence}")
        elif kind == "old id" and self.model.rows:
            spec = replace(spec, id=IdSpec("old", pick, ""))
        elif kind == "live key":
            live = [r for r in self.model.rows.values() if r.state in LIVE_STATES]
            if live:
                r = live[-1 - pick % len(live)]
                spec = replace(
                    spec,
                    id=replace(spec.id, kind="new"),
                    name=r.name,
                    tenant_id=r.tenant_id,
                    key=r.idempotency_key,
                )
        return self._new_job(spec, {})

    def _fire(self, fire: TaskFire, expect: str) -> object:
        got = self._both(
            "task_fire",
            functools.partial(self.model.task_fire, fire),
            functools.partial(self.driver.task_fire, fire),
        )
        if isinstance(got, JobsError):
            self._note(f"task fire refused {got.code}")
            return got
        self._seen(got)
        if got.enqueued is None:
            self._note(f"task fire fenced off ({expect})")
            return got
        self._note("task fire landed")
        if fire.watermark_ms > fire.occurrence_ms:
            self._note("task catch-up fire")
        if got.enqueued.deduped:
            by = "id" if got.enqueued.id == fire.job.id else "key"
            self._note(f"task fire deduped by {by}")
        return got

    def _task_marks(self, names: list[str]) -> None:
        """Read some marks (armed or not; none at all)."""
        got = self._both(
            "task_marks",
            functools.partial(self.model.task_marks, names),
            functools.partial(self.driver.task_marks, names),
        )
        self._seen(got)

    def _task_refused(self, kind: str, name: str) -> None:
        """A call the ABC refuses: nothing is armed, fired or enqueued (the state check sees)."""
        if kind in ("names twice", "names as a string", "empty name", "too many names"):
            # A string is a sequence of names to the type checker; the ABC refuses it.
            names: Sequence[str] = {
                "names twice": [name, UNARMED_TASK, name],
                "names as a string": name,
                "empty name": [UNARMED_TASK, ""],
                "too many names": [f"t{i}" for i in range(MAX_TASK_BATCH + 1)],
            }[kind]
            got: object = self._both(
                "task_arm(refused)",
                functools.partial(self.model.task_arm, names, self.now),
                functools.partial(self.driver.task_arm, names, self.now),
            )
        else:
            stored = self.model.marks.get(name)
            expect_ms = stored.watermark_ms if stored is not None else self.now
            occurrence = expect_ms + 1000
            fire = TaskFire(
                name, expect_ms, occurrence, occurrence, self._scheduled(name), self.now
            )
            if kind == "occurrence at the watermark":
                fire = replace(fire, occurrence_ms=expect_ms, watermark_ms=expect_ms)
            elif kind == "watermark before the occurrence":
                fire = replace(fire, watermark_ms=occurrence - 1)
            else:
                fire = replace(fire, job=replace(fire.job, tenant_id=""))
            got = self._both(
                "task_fire(refused)",
                functools.partial(self.model.task_fire, fire),
                functools.partial(self.driver.task_fire, fire),
            )
        assert isinstance(got, JobsError), f"the machine built a call nobody refuses: {kind}"

    def _scheduled(self, name: str) -> NewJob:
        """The job a scheduler fires for `name` now: a fresh id (and key), the task's name."""
        job_id = self._fresh_id("s")
        return NewJob(
            id=job_id,
            run_id=f"run-{job_id}",
            name=name,
            queue=QUEUES[0],
            tenant_id=None,
            idempotency_key=f"task@{self.now}:{job_id}",
            input_json="{}",
            priority=0,
            run_at_ms=self.now,
            max_attempts=1,
            created_at_ms=self.now,
        )

    def _task_pause(self, name: str, add: bool, claim: bool) -> None:
        """Pause or resume a task (most task names are job names too); with `claim`, while the
        task is paused, enqueue a job of its name due first in its queue and claim that queue:
        a task pause holds no job of its name."""
        pause = Pause("task", name)
        if add:
            self._both(
                "pause_add",
                functools.partial(self.model.pause_add, pause),
                functools.partial(self.driver.pause_add, pause),
            )
        else:
            self._both(
                "pause_remove",
                functools.partial(self.model.pause_remove, pause),
                functools.partial(self.driver.pause_remove, pause),
            )
        if not claim or pause not in self.model.pauses:
            return
        job = replace(self._scheduled(name), priority=0, run_at_ms=self.now - 3_600_000)
        self._both(
            "job_enqueue",
            functools.partial(self.model.job_enqueue, job),
            functools.partial(self.driver.job_enqueue, job),
        )
        got = self._claim(ClaimParams((job.queue,), WORKERS[0], 1, 1000, self.now))
        if isinstance(got, ClaimResult) and any(j.name == name for j in got.jobs):
            self._note("claim of a job named like a paused task")

    def _family_checks(self) -> list[Check]:
        checks = super()._family_checks()
        if self.capabilities.tasks and self._walks("tasks"):
            names = [*TASK_NAMES, UNARMED_TASK]
            checks.append(
                (
                    "task_marks",
                    functools.partial(self.model.task_marks, names),
                    functools.partial(self.driver.task_marks, names),
                )
            )
        return checks
