"""`import_rows()` and `export_rows()`: files read into a handle and queries written out, page
by page, each page one durable step, each run one entry in the sweep ledger.

`imports` and `exports` declare the jobs; `formats` finds record boundaries on bytes and writes
pages; `seams` reads sources and writes sinks (a directory, or fsspec URLs with the `fsspec`
extra) inside the run's tenant's place; `report` reads an import's refused records back.
"""

from jobs_core.factories.rows.exports import export_rows
from jobs_core.factories.rows.imports import import_rows
from jobs_core.factories.rows.report import import_report

__all__ = ["export_rows", "import_report", "import_rows"]
