"""The web dashboard: the operator surface as server-rendered pages (`dashboard_app(driver)`,
`ujobs dashboard`). Needs the `dashboard` extra: `pip install 'ultimat3-jobs[dashboard]'`."""

from jobs_core.dashboard.app import Dashboard, dashboard_app
from jobs_core.dashboard.security import Access

__all__ = ["Access", "Dashboard", "dashboard_app"]
