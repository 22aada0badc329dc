"""Driver URLs: `memory`, `postgresql+psycopg://…`, `redis://…` → a driver, found by entry point.

Backends register a factory under the `ujobs.drivers` entry-point group, one name per URL
scheme, so `jobs_core` names no backend and a third-party driver plugs in the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import cast

from jobs_core.driver import JobDriver
from jobs_core.errors import DriverUrlInvalidError

_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*)(?::|$)")


def mask_url(url: str) -> str:
    """`url` with any password replaced by `***` (SPEC §16)."""
    return re.sub(r"(//[^/@:]*:)[^/@]*@", r"\1***@", url)


def scheme_of(url: str) -> str:
    m = _SCHEME.match(url.strip().lower())
    if m is None:
        raise DriverUrlInvalidError(detail=mask_url(url))
    return m.group(1)


def driver_from_url(url: str) -> JobDriver:
    """A new, unopened driver for `url`; `X_DRIVER_URL_INVALID` names an unknown scheme."""
    scheme = scheme_of(url)
    found = {ep.name: ep for ep in entry_points(group="ujobs.drivers")}
    ep = found.get(scheme)
    if ep is None:
        raise DriverUrlInvalidError(
            f"no installed driver for scheme {scheme!r} (known: {', '.join(sorted(found))};"
            " install ultimat3-jobs[pg] or [redis])",
            detail=mask_url(url),
        )
    factory = cast(Callable[[str], JobDriver], ep.load())
    return factory(url)
