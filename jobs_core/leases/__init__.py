"""Fleet-wide limits on the driver's lease family: `Concurrency` and `RateLimit` declarations
(`limits`), the worker's admission of claimed jobs (`admit`), and `with_lock` (`lock`)."""

from jobs_core.leases.limits import Concurrency, RateLimit
from jobs_core.leases.lock import Lock, with_lock

__all__ = ["Concurrency", "Lock", "RateLimit", "with_lock"]
