"""`consumer()`: a job and its supervisor task that read a source in turns, each turn's batch
and its cursor committed together (`sources`), one run per consumer across the fleet (a lease),
the cursor per tenant in the driver's `consumers` family.
"""

from jobs_core.factories.consumers.declare import Consumer, consumer
from jobs_core.factories.consumers.sources import (
    FunctionSource,
    StreamSource,
    TableSource,
    Turn,
    function,
    stream,
    table,
)

__all__ = [
    "Consumer",
    "FunctionSource",
    "StreamSource",
    "TableSource",
    "Turn",
    "consumer",
    "function",
    "stream",
    "table",
]
