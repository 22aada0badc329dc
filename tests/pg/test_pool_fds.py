"""A process holding more than 1,024 descriptors keeps its connections (no dial per call).

`select` refuses a descriptor past 1,024; a staleness check built on it read every connection
as dead in such a process (a busy web app), so the driver dialled Postgres anew on every call.
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator

from tests.pg.conftest import fresh_driver

WANT_FDS = 1_100


@contextlib.contextmanager
def many_descriptors() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = WANT_FDS + 200
    assert hard == resource.RLIM_INFINITY or hard >= limit, f"hard RLIMIT_NOFILE {hard} too low"
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, limit), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(WANT_FDS)]
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_connections_past_descriptor_1024_are_reused() -> None:
    with many_descriptors():
        async with fresh_driver(pool_size=4) as pg:
            await pg.job_get_many(["warm"])
            here = pg._loops.get()
            assert here.hot is not None and here.hot.pgconn.socket > 1024
            backend = here.hot.pgconn.backend_pid
            for i in range(20):
                await pg.job_get_many([f"j{i}"])
                assert here.hot is not None
                assert here.hot.pgconn.backend_pid == backend, f"dialled again for call {i}"
