"""The chaos run's self-check (`make chaos ARGS=--self-check`) on made-up runs: every family's
clean run is all zeros and each of its defects moves its figure; and the self-check itself
catches a figure that cannot move. No server."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.chaos.families import Evidence, Family, families
from bench.chaos.selfcheck import check_family, check_plain, main


def test_every_family_proves_every_figure_can_move() -> None:
    assert check_plain() == []
    for family in families().values():
        if family.clean is not None:
            assert check_family(family) == [], family.name
    assert main(list(families().values())) == 0


@pytest.mark.parametrize(
    ("family", "figure"),
    [
        ("steps", "step effects run again after their record landed"),
        ("waits", "wakes doubled"),
        ("limits", "keyed limit exceeded"),
        ("sched", "occurrences never fired"),
        ("relay", "uncommitted stages that became jobs"),
        ("flows", "flows lost: missing"),
        ("flows", "flows lost: never finished"),
        ("flows", "parents past their gather twice"),
        ("flows", "parents handed a wrong or missing child result"),
        ("flows", "children enqueued twice"),
        ("flows", "dependents started early"),
        ("flows", "dependents against their policy"),
        ("flows", "batch callbacks with wrong counts"),
        ("factories", "postings stored with other lines"),
        ("factories", "currencies not summing to zero"),
        ("factories", "consumer records never handled"),
        ("factories", "consumer records handled twice outside a batch a fault cut"),
        ("factories", "consumer records written twice by committed turns"),
        ("factories", "webhook events 2xx'd again with no kill, outage or drain"),
        ("factories", "webhook events never delivered"),
        ("factories", "webhook attempts recorded delivered without a 2xx"),
        ("factories", "sweeps whose ledger count is not their rows"),
        ("factories", "sweep rows never handled"),
    ],
)
def test_a_broken_variant_fails_the_run_on_its_figure(family: str, figure: str) -> None:
    fam = families()[family]
    assert fam.clean is not None
    evidence = fam.clean()
    assert not fam.analyse(evidence).failed
    fam.cases[figure](evidence)
    found = fam.analyse(evidence)
    assert found.figure(figure).value > 0
    assert [f.name for f in found.failed] == [figure]


def _inert(ev: Evidence) -> None:
    """A defect that changes nothing: the figure it claims to move stays 0."""


def test_the_self_check_catches_a_figure_that_cannot_move() -> None:
    steps = families()["steps"]
    broken: Family = replace(steps, cases={**steps.cases, "step answers that changed": _inert})
    assert check_family(broken) == [
        "'step answers that changed' stayed 0 with its defect",
        "'step answers that changed' is hard but did not fail the run",
    ]
    unproven: Family = replace(
        steps, cases={k: v for k, v in steps.cases.items() if k != "step answers that changed"}
    )
    assert check_family(unproven) == ["no case proves 'step answers that changed' can be non-zero"]


def test_the_schedulers_must_fire_up_to_the_timelines_end() -> None:
    """Fires that stop before the timeline's end leave its last occurrences never fired, and
    a task armed but never fired leaves every occurrence after its arming never fired."""
    sched = families()["sched"]
    assert sched.clean is not None
    evidence = sched.clean()
    del evidence.rows["t2"]  # the last fire (second 4)
    assert sched.analyse(evidence).figure("occurrences never fired").value == 1
    evidence.rows.clear()
    evidence.extra["mark"] = {"watermark": evidence.cfg.started_t, "fired": None}
    assert sched.analyse(evidence).figure("occurrences never fired").value == 5


def test_the_flows_figures_excuse_a_crash_and_nothing_else() -> None:
    """A parent (or a batch callback) past its gather again after its worker was killed -9
    between its return and its settle is a replay, not a double; the same pass with no kill is
    a double. A callback that never ran also fails the figures that say so."""
    flows = families()["flows"]
    assert flows.clean is not None
    evidence = flows.clean()
    flows.cases["parents replayed"](evidence)
    found = flows.analyse(evidence)
    assert found.figure("parents replayed").value == 1
    assert not found.failed
    evidence = flows.clean()
    flows.cases["parents past their gather twice"](evidence)
    assert flows.analyse(evidence).figure("parents past their gather twice").value == 1
    evidence = flows.clean()
    flows.cases["batch callbacks fired twice"](evidence)
    assert [f.name for f in flows.analyse(evidence).failed] == ["batch callbacks fired twice"]
    evidence = flows.clean()
    flows.cases["batch callbacks never fired"](evidence)
    assert {f.name for f in flows.analyse(evidence).failed} == {
        "batch callbacks never fired",
        "flows that ended wrong",
    }


def test_the_factories_figures_excuse_a_kill_and_catch_a_double() -> None:
    """A posting applied by two jobs fails on its answers and on the balances; two turns of the
    consumer at once fail; a record handed
    over again after the kill -9 of its first batch's worker (or an outage) is the documented
    at-least-once, and so is a second 2xx whose sender was killed before its settle; the same
    repeats with no fault fail the run."""
    fac = families()["factories"]
    assert fac.clean is not None
    evidence = fac.clean()
    fac.cases["postings applied twice"](evidence)
    assert {f.name for f in fac.analyse(evidence).failed} == {
        "postings applied twice",
        "balances off the distinct postings",
    }
    evidence = fac.clean()
    fac.cases["consumer turns run beside another"](evidence)
    assert "consumer turns run beside another" in {f.name for f in fac.analyse(evidence).failed}
    for figure, allowed in (
        ("consumer records handled twice outside a batch a fault cut", ()),
        (
            "consumer records handled twice in a batch a kill -9 cut",
            ("consumer records handled twice outside a batch a fault cut",),
        ),
        (
            "consumer records handled twice in a batch an outage or a drain cut",
            ("consumer records handled twice outside a batch a fault cut",),
        ),
        ("webhook events 2xx'd again with no kill, outage or drain", ()),
        (
            "webhook events 2xx'd again after a kill -9",
            ("webhook events 2xx'd again with no kill, outage or drain",),
        ),
    ):
        evidence = fac.clean()
        fac.cases[figure](evidence)
        found = fac.analyse(evidence)
        assert found.figure(figure).value > 0, figure
        assert all(found.figure(name).value == 0 for name in allowed), figure
        assert bool(found.failed) == (not allowed), figure
