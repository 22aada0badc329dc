"""Fixed scenarios: the cases a random walk rarely reaches, each spelled out with real asserts.

One module per driver family (`jobs`, `operator`, `durable`: steps and events, `leases`,
`tasks`, `flows`, `sweeps`, `postings`, `consumers`, `webhooks`), and two across them: `twins`
(near-twin identifiers, which a store comparing as a collation or a pattern does takes for one
another) and `edges` (edges the random walks reach from some seeds only); each scenario is
`async def scenario_x(driver)` over a fresh, empty driver, and `SCENARIOS` lists them all by
name. Times are fixed offsets from `T0`, handed in as every call's `now_ms`.
"""

from jobs_core.testing.scenarios.attempts import ATTEMPT_SCENARIOS
from jobs_core.testing.scenarios.consumers import CONSUMER_SCENARIOS
from jobs_core.testing.scenarios.durable import DURABLE_SCENARIOS
from jobs_core.testing.scenarios.edges import EDGE_SCENARIOS
from jobs_core.testing.scenarios.flows import FLOW_SCENARIOS
from jobs_core.testing.scenarios.gaps import GAP_SCENARIOS
from jobs_core.testing.scenarios.holes import HOLE_SCENARIOS
from jobs_core.testing.scenarios.jobs import JOB_SCENARIOS
from jobs_core.testing.scenarios.leases import LEASE_SCENARIOS
from jobs_core.testing.scenarios.operator import OPERATOR_SCENARIOS
from jobs_core.testing.scenarios.postings import POSTING_SCENARIOS
from jobs_core.testing.scenarios.support import Scenario
from jobs_core.testing.scenarios.sweeps import SWEEP_SCENARIOS
from jobs_core.testing.scenarios.tasks import TASK_SCENARIOS
from jobs_core.testing.scenarios.twins import TWIN_SCENARIOS
from jobs_core.testing.scenarios.webhooks import WEBHOOK_SCENARIOS

#: Every scenario by name (the function name without `scenario_`).
SCENARIOS: dict[str, Scenario] = {
    **JOB_SCENARIOS,
    **OPERATOR_SCENARIOS,
    **DURABLE_SCENARIOS,
    **LEASE_SCENARIOS,
    **TASK_SCENARIOS,
    **FLOW_SCENARIOS,
    **SWEEP_SCENARIOS,
    **POSTING_SCENARIOS,
    # -- consumers --
    **CONSUMER_SCENARIOS,
    **WEBHOOK_SCENARIOS,
    # -- attempts --
    **ATTEMPT_SCENARIOS,
    # -- twins --
    **TWIN_SCENARIOS,
    **EDGE_SCENARIOS,
    **GAP_SCENARIOS,
    **HOLE_SCENARIOS,
}

__all__ = ["SCENARIOS", "Scenario"]
