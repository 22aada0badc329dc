"""What the teeth tests of both parity suites share: the settings their walks run under."""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings


def teeth_settings(max_examples: int) -> settings:
    """`max_examples` walks of 30 steps, derandomized and never shrunk, with no example
    database: the same answer on every run, and quick."""
    return settings(
        max_examples=max_examples,
        stateful_step_count=30,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
    )
