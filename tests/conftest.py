"""Shared test setup: the Hypothesis profiles `jobs_core.testing` ships (`HYPOTHESIS_PROFILE`).

Our test command runs `ci` (the Makefile and scripts set it); `nightly` is the long run. The
profiles live in the package, so a third-party driver's tests get the very same ones.
"""

from jobs_core.testing.profiles import register_profiles

register_profiles()
