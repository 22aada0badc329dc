"""The Hypothesis profiles the parity suite ships, chosen by `HYPOTHESIS_PROFILE`.

- `default` (no variable set): what a third-party driver's CI gets — for the job family's walk,
  40 walks of 30 steps, no shrinking, so a failing run costs about what a passing one does.
- `ci`: what our own test command runs: three quarters of `default`'s walks (30 for the job
  family), of 30 steps. The teeth tests (tests/test_parity_teeth.py, test_outbox_teeth.py) walk
  under these very numbers: every broken driver is still caught and every edge reached as often
  as their bounds ask (at half the walks three edges fell short of them, measured 2026-12-07).
  `default` keeps 40, so a third-party driver's CI walks at least as far as ours.
- `nightly`: 25 times the walks, of 60 steps, shrunk to a minimal failing program.
- `debug`: `ci`'s numbers with shrinking: rerun a `ci` failure under it with its seed, and the
  same walk is found again (Hypothesis draws its first walks by the walk count, so the count must
  be `ci`'s), then shrunk to a minimal one.

Each family is walked by its own machine (`make_machine(factory, {family})`), sized to the edges
it must reach: `FAMILY_SHARE` scales a profile's walks for it (`suite_settings(family)`), so a
family joining the suite adds a walk of its own and never thins another's. A name that is not
one of these but is registered with Hypothesis (a project's own profile) is used as it stands,
scaled alike. Every walk prints its seed; `pytest --hypothesis-seed=N` replays it. The shipped
profiles keep no example database, so that the seed alone decides the walk (a database would
replay an earlier run's failure under a new run's seed, one driver's under another's).
"""

from __future__ import annotations

import os
from typing import Final

from hypothesis import HealthCheck, Phase, settings

#: The environment variable naming the profile.
PROFILE_ENV: Final = "HYPOTHESIS_PROFILE"

# No target phase in a walk of fixed cost: below 1,000 examples Hypothesis's hill climbing on a
# target runs as many extra walks as it keeps improving (1,785 after a 40-walk run, measured),
# and the rules aim at the edges themselves. The long run keeps it.
_FAST_PHASES: Final = (Phase.explicit, Phase.reuse, Phase.generate)
_ALL_PHASES: Final = (*_FAST_PHASES, Phase.shrink)

#: Each shipped profile's settings (a drivers' round-trips are slow for Hypothesis's taste).
PROFILES: Final[dict[str, dict[str, object]]] = {
    "default": {
        "max_examples": 40,
        "stateful_step_count": 30,
        "phases": _FAST_PHASES,
    },
    "ci": {
        "max_examples": 30,
        "stateful_step_count": 30,
        "phases": _FAST_PHASES,
    },
    "nightly": {
        "max_examples": 1000,
        "stateful_step_count": 60,
        "phases": (*_ALL_PHASES, Phase.target),
    },
    "debug": {
        "max_examples": 30,
        "stateful_step_count": 30,
        "phases": _ALL_PHASES,
    },
}

_COMMON: Final[dict[str, object]] = {
    "deadline": None,
    "database": None,
    # One failure reported, not every distinct one: the first is the one to fix.
    "report_multiple_bugs": False,
    "print_blob": True,
    "suppress_health_check": (HealthCheck.too_slow, HealthCheck.data_too_large),
}


#: Each family walk's share of a profile's walks (the job family's walk has them all). A family
#: whose edges its rules aim at directly needs fewer walks than the job family, whose rules
#: meet each other's rows; see each family's reach test (tests/test_parity_teeth.py).
FAMILY_SHARE: Final[dict[str, float]] = {
    "jobs": 1.0,
    "operator": 0.625,
    "counters": 0.5,
    "durable": 0.625,
    "leases": 0.375,
    "tasks": 0.5,
    "retention": 0.375,
    "flows": 0.5,
    "sweeps": 0.325,
    "postings": 0.325,
    # -- consumers --
    "consumers": 0.25,
    "webhooks": 0.25,
}


def profile_settings(name: str) -> settings:
    """The settings of shipped profile `name` (`KeyError` for another name)."""
    return settings(**_COMMON, **PROFILES[name])  # type: ignore[arg-type]


def scaled(base: settings, family: str) -> settings:
    """`base` with its walks scaled to `family`'s share (at least one walk)."""
    walks = max(1, round(base.max_examples * FAMILY_SHARE[family]))
    return settings(base, max_examples=walks)


def selected_profile() -> str:
    """The profile `HYPOTHESIS_PROFILE` names, or `default` when it is unset or empty."""
    return os.environ.get(PROFILE_ENV) or "default"


def suite_settings(family: str = "jobs") -> settings:
    """The settings `family`'s walk runs under: the selected profile's, scaled to the family.

    A shipped name gives ours; any other name must be registered with Hypothesis (a project's
    own profile), else Hypothesis's `InvalidArgument` names it.
    """
    name = selected_profile()
    base = profile_settings(name) if name in PROFILES else settings.get_profile(name)
    return scaled(base, family)


def register_profiles(*, load: bool = True) -> str:
    """Register every shipped profile with Hypothesis and (by default) load the selected one.

    For a project's own conftest, so its other Hypothesis tests run under the same profile;
    the parity suite itself does not need it. Overwrites any profile of the same name. Answers
    the selected name.
    """
    for name in PROFILES:
        settings.register_profile(name, profile_settings(name))
    name = selected_profile()
    if load:
        settings.load_profile(name)
    return name
