"""Scratch stores: one test's own empty store on a shared server, dropped after the test.

A backend offers one by defining `scratch_store(url) -> ScratchStore` in the module its
`ujobs.drivers` entry point names (beside `from_url`), so `jobs_core` names no backend here
either: the Postgres one is a fresh schema (`?schema=`), the Redis one a fresh key prefix
(`?prefix=`), the memory one a new in-process store. A third-party driver does the same to
let its users run the `ujobs` fixture on it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Protocol, cast

from jobs_core.errors import DriverNotInstalledError, DriverUnsupportedError
from jobs_core.urls import entry_point_for, mask_url, scheme_of


class ScratchStore(Protocol):
    """A store made for one test on the server a URL names: empty, its own, dropped after.

    Making it (`scratch_store(url)`) does no I/O; the caller opens a driver on `url` and calls
    its `migrate()` to create the schema, and closes that driver before `drop()`.
    """

    @property
    def url(self) -> str:
        """The driver URL that reaches this store, and nothing else on the server."""
        ...

    async def drop(self) -> None:
        """Delete everything the store holds (its schema, its keys); idempotent."""
        ...


def scratch_store(url: str) -> ScratchStore:
    """A new scratch store on the server `url` names, from its driver's module.

    `X_DRIVER_URL_INVALID` for a scheme no driver serves, `X_DRIVER_NOT_INSTALLED` when the
    driver's libraries are missing, `X_DRIVER_UNSUPPORTED` when its module has no
    `scratch_store`.
    """
    scheme = scheme_of(url)
    ep = entry_point_for("ujobs.drivers", "driver", url)
    try:
        module = importlib.import_module(ep.module)
        make = getattr(module, "scratch_store", None)
        if make is None:
            raise DriverUnsupportedError(
                f"{ep.module} has no scratch_store(url): the {scheme} driver cannot give a test"
                " a store of its own",
                detail=mask_url(url),
            )
        return cast(Callable[[str], ScratchStore], make)(url)
    except ModuleNotFoundError as exc:
        raise DriverNotInstalledError(
            f"the {scheme} driver needs {exc.name or 'a library'} that is not installed",
            detail=mask_url(url),
        ) from exc
