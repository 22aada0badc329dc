"""An import's error report, read back: the records a run refused, from its page steps' records.

Each entry is `{"line": int, "field": str | None, "code": str}` — where the record starts (the
file's 1-based physical line), the column or top-level key at fault when there is one, and
why (`REFUSALS`) — never the refused value. A page keeps its first `report_per_page` refusals
(the ledger counts them all), so the report is bounded per page and in page order.
"""

from __future__ import annotations

import re
from typing import Any, Final

from jobs_core.driver import JobDriver
from jobs_core.errors import OptionInvalidError
from jobs_core.factories.rows.formats import REFUSALS
from jobs_core.jsonform import loads

__all__ = ["REFUSALS", "import_report"]

#: A page step's name: `page:<index>`.
_PAGE: Final = re.compile(r"page:(0|[1-9][0-9]{0,17})")
#: The most entries one call answers.
MAX_REPORT_LIMIT: Final = 100_000


async def import_report(driver: JobDriver, run_id: str, limit: int) -> list[dict[str, Any]]:
    """The first `limit` refused records of import run `run_id`, in the file's order (empty
    for a run that refused none, or whose steps were purged). One `step_list`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_REPORT_LIMIT:
        raise OptionInvalidError(f"must be an integer in [1, {MAX_REPORT_LIMIT}]", detail="limit")
    pages: list[tuple[int, str]] = []
    for record in await driver.step_list(run_id):
        m = _PAGE.fullmatch(record.name)
        if m is not None:
            pages.append((int(m.group(1)), record.output_json))
    pages.sort()
    out: list[dict[str, Any]] = []
    for _, text in pages:
        value = loads(text)
        entries = value.get("report") if isinstance(value, dict) else None
        if not isinstance(entries, list):
            continue
        for entry in entries:
            if not isinstance(entry, dict):
                continue
            line, field, code = entry.get("line"), entry.get("field"), entry.get("code")
            if isinstance(line, int) and isinstance(code, str):
                out.append(
                    {"line": line, "field": field if isinstance(field, str) else None, "code": code}
                )
                if len(out) >= limit:
                    return out
    return out
