"""Cron occurrences as instants across DST, in three zones and both transitions of 2026:
a skipped wall time fires once at the end of the gap, a repeated one once, at its first pass."""

from __future__ import annotations

import datetime as dt

import pytest

from jobs_core.error_help import what_to_do
from jobs_core.errors import TaskCronInvalidError, TaskTzInvalidError
from jobs_core.job import JobRegistry, job
from jobs_core.scheduler.cron import CronSchedule
from jobs_core.scheduler.task import TaskRegistry, task


async def _noop(input: object, ctx: object) -> None:
    return None


JOB = job(_noop, name="cron-noop", tenant="none", registry=JobRegistry())


def ms(iso: str) -> int:
    return int(dt.datetime.fromisoformat(iso).timestamp() * 1000)


def local(schedule: CronSchedule, at_ms: int) -> str:
    return dt.datetime.fromtimestamp(at_ms / 1000, schedule.tz).isoformat()


def walk(schedule: CronSchedule, start_iso: str, count: int) -> list[str]:
    at, out = ms(start_iso), []
    for _ in range(count):
        at = schedule.next_after(at)
        out.append(local(schedule, at))
    return out


# (zone, cron, a time before the transition, the occurrences from there), for each transition.
DAILY = [
    # Spring, Paris: 02:00 CET -> 03:00 CEST; 02:30 does not exist, fires at 03:00 CEST.
    (
        "Europe/Paris",
        "30 2 * * *",
        "2026-03-28T12:00:00+00:00",
        ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"],
    ),
    # Autumn, Paris: 03:00 CEST -> 02:00 CET; 02:30 happens twice, fires at the first.
    (
        "Europe/Paris",
        "30 2 * * *",
        "2026-10-24T12:00:00+00:00",
        ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
    ),
    (
        "America/New_York",
        "0 2 * * *",
        "2026-03-07T12:00:00+00:00",
        ["2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00"],
    ),
    (
        "America/New_York",
        "30 1 * * *",
        "2026-10-31T12:00:00+00:00",
        ["2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"],
    ),
    # Lord Howe shifts by 30 minutes: 02:00 -> 02:30 in October, 02:00 -> 01:30 in April.
    (
        "Australia/Lord_Howe",
        "15 2 * * *",
        "2026-10-03T00:00:00+00:00",
        ["2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"],
    ),
    (
        "Australia/Lord_Howe",
        "45 1 * * *",
        "2026-04-04T00:00:00+00:00",
        ["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"],
    ),
]


@pytest.mark.parametrize(("tz", "cron", "start", "expected"), DAILY)
def test_a_daily_time_fires_once_on_a_transition_day(
    tz: str, cron: str, start: str, expected: list[str]
) -> None:
    assert walk(CronSchedule(cron, tz), start, 2) == expected


@pytest.mark.parametrize("tz", ["Europe/Paris", "America/New_York", "Australia/Lord_Howe"])
@pytest.mark.parametrize("cron", ["30 2 * * *", "0 1 * * *"])
def test_a_year_fires_a_daily_time_once_a_day(tz: str, cron: str) -> None:
    """Over 2026 a daily cron fires on every local day once, in order, whatever the
    transitions do."""
    schedule = CronSchedule(cron, tz)
    at, end = ms("2026-01-01T12:00:00+00:00"), ms("2027-01-01T12:00:00+00:00")
    seen: list[int] = []
    while (at := schedule.next_after(at)) < end:
        seen.append(at)
    days = [dt.datetime.fromtimestamp(s / 1000, schedule.tz).date() for s in seen]
    assert seen == sorted(set(seen))
    assert len(set(days)) == len(days) == 365


@pytest.mark.parametrize(
    ("tz", "day", "lost"),
    [
        # Each transition day of 2026: how many fewer than 144 fires.
        # 02:00-02:50 do not exist: they fire once, at 03:00, with the 03:00 that does.
        ("Europe/Paris", "2026-03-29", 6),
        ("Europe/Paris", "2026-10-25", 0),  # 02:00-02:50 twice: each fires once
        ("America/New_York", "2026-03-08", 6),
        ("America/New_York", "2026-11-01", 0),
        ("Australia/Lord_Howe", "2026-10-04", 3),  # 02:00-02:20 fire once, with 02:30
        ("Australia/Lord_Howe", "2026-04-05", 0),
    ],
)
def test_a_transition_day_every_ten_minutes(tz: str, day: str, lost: int) -> None:
    schedule = CronSchedule("*/10 * * * *", tz)
    start = dt.datetime.fromisoformat(day).replace(tzinfo=schedule.tz)
    at, end = (
        int(start.timestamp() * 1000) - 1,
        int((start + dt.timedelta(days=1)).timestamp() * 1000),
    )
    seen: list[int] = []
    while (at := schedule.next_after(at)) < end:
        seen.append(at)
    walls = {dt.datetime.fromtimestamp(s / 1000, schedule.tz).replace(tzinfo=None) for s in seen}
    assert seen == sorted(set(seen))
    assert len(seen) == len(walls) == 144 - lost


def test_skipped_wall_times_collapse_into_the_end_of_the_gap() -> None:
    paris = CronSchedule("*/20 * * * *", "Europe/Paris")
    assert walk(paris, "2026-03-29T00:30:00+00:00", 3) == [
        "2026-03-29T01:40:00+01:00",
        "2026-03-29T03:00:00+02:00",  # 02:00, 02:20, 02:40 do not exist: one fire, at 03:00
        "2026-03-29T03:20:00+02:00",
    ]


def test_a_repeated_span_fires_its_first_pass_only() -> None:
    paris = CronSchedule("*/20 * * * *", "Europe/Paris")
    assert walk(paris, "2026-10-24T23:50:00+00:00", 5) == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:20:00+02:00",
        "2026-10-25T02:40:00+02:00",
        "2026-10-25T03:00:00+01:00",  # the second pass of 02:00-02:59 fires nothing
        "2026-10-25T03:20:00+01:00",
    ]


@pytest.mark.parametrize(
    ("until", "latest"),
    [
        ("2026-10-25T00:30:00+00:00", "2026-10-25T02:20:00+02:00"),
        # In the second pass (02:10 CET): the last occurrence is the first pass's 02:40.
        ("2026-10-25T01:10:00+00:00", "2026-10-25T02:40:00+02:00"),
        ("2026-03-29T01:05:00+00:00", "2026-03-29T03:00:00+02:00"),
        ("2026-03-29T00:59:59+00:00", "2026-03-29T01:40:00+01:00"),
    ],
)
def test_latest_until_agrees_with_the_forward_walk(until: str, latest: str) -> None:
    paris = CronSchedule("*/20 * * * *", "Europe/Paris")
    found = paris.latest_until(ms(until))
    assert local(paris, found) == latest
    assert paris.next_after(found) > ms(until)


def test_six_fields_read_seconds_first() -> None:
    every = CronSchedule("30 0 12 * * *", "UTC")
    assert walk(every, "2026-06-01T00:00:00+00:00", 2) == [
        "2026-06-01T12:00:30+00:00",
        "2026-06-02T12:00:30+00:00",
    ]
    # The refusal's advice (the error reference prints it) says the order the parser reads.
    assert "seconds first" in what_to_do("X_TASK_CRON_INVALID")


@pytest.mark.parametrize(
    ("cron", "tz", "error"),
    [
        ("61 * * * *", "UTC", TaskCronInvalidError),
        ("* * *", "UTC", TaskCronInvalidError),
        ("0 0 1 1 * 2030 x", "UTC", TaskCronInvalidError),
        ("0 0 30 2 *", "UTC", TaskCronInvalidError),
        ("", "UTC", TaskCronInvalidError),
        ("0 2 * * *", "Mars/Olympus", TaskTzInvalidError),
        ("0 2 * * *", "", TaskTzInvalidError),
        ("0 2 * * *", None, TaskTzInvalidError),
        ("0 2 * * *", "../../etc/passwd", TaskTzInvalidError),
    ],
)
def test_bad_expressions_and_zones_are_refused(cron: str, tz: object, error: type) -> None:
    with pytest.raises(error):
        CronSchedule(cron, tz)


#: Every croniter form a task takes, one per extension: names, `?`, `L` (the last day, the last
#: given weekday), `#` (the nth weekday), `W` (the nearest weekday), steps on names, each alias,
#: seconds first, and `H` (hashed from the task's name) alone, stepped and in a range.
ACCEPTED = [
    "0 3 L * *",
    "0 3 1-L/10 * *",
    "0 3 * * L5",
    "0 3 * * 1#2",
    "0 3 15W * *",
    "0 3 ? * MON-FRI",
    "*/7 * * JAN,JUL *",
    "@hourly",
    "@daily",
    "@midnight",
    "@weekly",
    "@monthly",
    "@yearly",
    "@annually",
    "30 */5 * * * *",
    "H 3 * * *",
    "H/15 * * * *",
    "H(0-29) H(1-4) * * *",
    "H H H * * *",
]


@pytest.mark.parametrize("cron", ACCEPTED)
def test_an_accepted_cron_names_the_same_instants_at_every_read(cron: str) -> None:
    """`next_after` of one instant answers one occurrence, however often and on whichever
    scheduler it is asked (two declarations of one task), and walking back agrees."""
    first = CronSchedule(cron, "Europe/Paris", hash_id="nightly")
    again = CronSchedule(cron, "Europe/Paris", hash_id="nightly")
    at = ms("2026-03-27T00:00:00+00:00")
    for _ in range(40):
        answers = {first.next_after(at) for _ in range(4)} | {again.next_after(at)}
        assert len(answers) == 1, (cron, at, sorted(answers))
        (at,) = answers
        assert first.latest_until(at) == again.latest_until(at) == at


def test_a_random_field_would_fire_at_other_times_at_every_read() -> None:
    """Why `R` is refused: croniter draws it anew for every walk (the issue's task fired 1-4
    times a day), so one instant has several next occurrences."""
    from croniter import croniter

    start = dt.datetime(2026, 3, 1)
    answers = {croniter("R 3 * * *", start).get_next(dt.datetime) for _ in range(40)}
    assert len(answers) > 1


@pytest.mark.parametrize(
    ("cron", "field"),
    [
        ("R 3 * * *", "the minute field 'R' is random"),
        ("0 R(1-4) * * *", "the hour field 'R(1-4)' is random"),
        ("r/15 * * * *", "the minute field 'r/15' is random"),
        ("0 0 3 * * R", "the day-of-week field 'R' is random"),
        ("R 0 3 * * *", "the second field 'R' is random"),
        ("0 0 3 * * * 2030", "the year field '2030' is not taken"),
    ],
)
def test_a_field_that_is_not_stable_is_refused_by_name(cron: str, field: str) -> None:
    with pytest.raises(TaskCronInvalidError) as caught:
        CronSchedule(cron, "UTC", hash_id="nightly")
    assert caught.value.code == "X_TASK_CRON_INVALID"
    assert field in caught.value.message, caught.value.message


def test_a_hashed_field_needs_an_id_and_a_task_gives_its_name() -> None:
    with pytest.raises(TaskCronInvalidError, match="the minute field 'H' is hashed"):
        CronSchedule("H 3 * * *", "UTC")
    registry = TaskRegistry()
    declared = [
        task(name, cron="H H * * *", tz="UTC", job=JOB, input={"n": 1}, registry=registry)
        for name in ("alpha", "beta")
    ]
    at = ms("2026-06-01T00:00:00+00:00")
    alpha, beta = (t.schedule.next_after(at) for t in declared)
    assert alpha == CronSchedule("H H * * *", "UTC", hash_id="alpha").next_after(at)
    assert alpha != beta, "two task names hashed to one time: pick names that differ"
    # An alias keeps its plain meaning beside an id: croniter would hash `@daily` with one.
    midnight = CronSchedule("@daily", "UTC", hash_id="alpha").next_after(at)
    assert local(CronSchedule("@daily", "UTC"), midnight) == "2026-06-02T00:00:00+00:00"
