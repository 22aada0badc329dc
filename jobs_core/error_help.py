"""What to do about each `X_*` code (`jobs_core.errors.CODES` says what it means): the advice
the error reference (docs/reference/errors.md, generated) prints beside each code.

`what_to_do(code)` answers the code's own advice, else its family's (`X_*_DECLARATION_INVALID`,
`X_*_SCOPE_INVALID`…); tests/test_docs_site.py fails when a code has neither, so a new code
cannot reach the reference without advice.
"""

from __future__ import annotations

from typing import Final

#: Advice for a whole family of codes, by how the code ends.
BY_SUFFIX: Final[dict[str, str]] = {
    "_DECLARATION_INVALID": (
        "Raised at import time, before anything runs: fix the declaration the message names "
        "(the detail says which argument)."
    ),
    "_SCOPE_INVALID": (
        "The run would touch another tenant's rows: derive the scope from the tenant the run "
        "acts for (`ctx.tenant`), never from input alone."
    ),
    "_PAGE_INVALID": (
        "Your page function answered something the sweep cannot resume from: return a list "
        "and a JSON cursor (None at the end) that moves forward."
    ),
    "_COMPLETED": (
        "Nothing to do: the same declaration already completed for this input. Change the "
        "declaration (its version) or the input to run it again."
    ),
}

#: Advice for one code.
BY_CODE: Final[dict[str, str]] = {
    "X_ABORTED": (
        "Nothing: the run ended (cancel, lost claim) and another attempt or nobody owns it."
    ),
    "X_BACKFILL_BATCH_FAILED": (
        "Read the cause in `ujobs jobs show ID`; fix the source or handle. The next attempt "
        "resumes from the last recorded cursor."
    ),
    "X_BACKFILL_ENVIRONMENT": (
        "Run it where it is declared (`$UJOBS_ENVIRONMENT`), or add the environment to its "
        "`environments=`."
    ),
    "X_BACKFILL_REQUIRES_PENDING": "Run the backfills it `requires=` first (`ujobs backfills`).",
    "X_BACKFILL_STALLED": (
        "The source returned fewer rows than `count=`: check the source, or correct `count=`."
    ),
    "X_CLI_DRIVER_REQUIRED": (
        "Pass `--driver URL` or set `UJOBS_DRIVER` (`--driver memory` to mean it)."
    ),
    "X_CLI_EXTRA_MISSING": (
        "Install the extra the message names, e.g. `pip install 'ultimat3-jobs[dashboard]'`;"
        " for `--loop uvloop`, `pip install 'ultimat3-jobs[pg]'` (or `[redis]`) on CPython off"
        " Windows, or run with `--loop auto`."
    ),
    "X_CLI_MODULE_INVALID": (
        "Check the module path is importable from the current directory (or `PYTHONPATH`); "
        "the message carries the import error."
    ),
    "X_CLI_NO_JOBS": "Declare jobs with `@job` at module level in the module you named.",
    "X_CLI_USAGE_INVALID": "Read `ujobs COMMAND --help`; the message names the bad argument.",
    "X_CONSUMER_CURSOR_MOVED": "Nothing: another turn got there first; the next turn continues.",
    "X_CONSUMER_SELF_ENQUEUE": "Do not enqueue a consumer's job yourself: its supervisor does.",
    "X_CONSUMER_SOURCE_INVALID": (
        "Your source answered records or a cursor the consumer cannot hold: return JSON values "
        "and a forward-moving cursor."
    ),
    "X_DASHBOARD_AUTH_REQUIRED": "Send the dashboard's token, or its user and password.",
    "X_DASHBOARD_CSRF_INVALID": (
        "Reload the page and act again (the form's token expired or was missing)."
    ),
    "X_DASHBOARD_READ_ONLY": "Start the dashboard with credentials to allow actions.",
    "X_DASHBOARD_REQUEST_INVALID": "Check the URL; use the dashboard's own links and forms.",
    "X_DRAINING": "Nothing: the worker is stopping; another worker claims the job.",
    "X_DRIVER_CANCELLED": (
        "A statement timeout or an operator's cancel: look for long-running statements or locks "
        "in the store; the call may be retried."
    ),
    "X_DRIVER_CAPABILITY_MISSING": (
        "Use a driver that declares the family (Postgres and Redis declare them all), or do "
        "without the feature."
    ),
    "X_DRIVER_CONFLICT": "Retry later; if it persists, look for contention on the same rows.",
    "X_DRIVER_SCHEMA_MISSING": (
        "Install or upgrade the schema: `ujobs db upgrade --driver URL` (or `alembic upgrade "
        "head` in a checkout), then start again. Check the URL's `?schema=` names the schema "
        "you installed."
    ),
    "X_DRIVER_ERROR": (
        "When it says the jobs schema is not installed or is behind: run `ujobs db upgrade "
        "--driver URL` with the same URL (its `?schema=`). Otherwise unexpected: read the "
        "message and the store's log, and report it with both."
    ),
    "X_DRIVER_LIMIT": "Shorten the value the message names (the store's own limit).",
    "X_DRIVER_NOT_INSTALLED": "Install the extra: `pip install 'ultimat3-jobs[pg]'` or `[redis]`.",
    "X_DRIVER_UNAVAILABLE": (
        "Check the store is up and reachable from here; workers retry with back-off on their own."
    ),
    "X_DRIVER_UNSUPPORTED": "Use a driver that offers the capability, or do without it.",
    "X_DRIVER_URL_INVALID": (
        "Fix the URL: `memory`, `postgresql://…`, `redis://…` (see the backends guide)."
    ),
    "X_EXPORT_SINK_INVALID": (
        "Check the sink's URL or directory exists and is writable (fsspec extra for URLs)."
    ),
    "X_IMPORT_HEADER_INVALID": "Fix the CSV's header row: every column named, once.",
    "X_IMPORT_RECORD_INVALID": (
        "Fix the record the detail names (line number), or let `on_invalid` skip it."
    ),
    "X_IMPORT_RECORD_TOO_LARGE": "Raise `max_record_bytes`, or fix the file (a missing newline?).",
    "X_IMPORT_SOURCE_INVALID": "Check the source exists and is readable (fsspec extra for URLs).",
    "X_JOB_BATCH_TOO_LARGE": "Split the batch: at most 10,000 records a call.",
    "X_JOB_CANCELLED": "Nothing: someone cancelled the job; requeue it if that was a mistake.",
    "X_JOB_CLAIM_QUEUES_EMPTY": "Name at least one queue.",
    "X_JOB_CONCURRENCY_KEY_INVALID": "Make the key function answer a string for every input.",
    "X_JOB_CONCURRENCY_UNENFORCEABLE": "Use a driver with the leases family, or drop the limit.",
    "X_JOB_DEPENDENCY_FAILED": "Fix and requeue the dependency, then requeue this job.",
    "X_JOB_DEPENDENCY_UNKNOWN": "Enqueue the dependency first, and pass its id.",
    "X_JOB_DUPLICATE": "Give each job its own name (two functions declared under one name).",
    "X_JOB_INPUT_INVALID": (
        "Pass JSON values (dicts, lists, str, int, finite float, bool, None); datetimes, UUIDs, "
        "Decimals, enums, tuples and dataclasses are converted for you (a datetime arrives as "
        "its ISO string). Convert anything else yourself (a set to a list, an object to a "
        "dict): the detail is the path of the value refused, e.g. `.order`."
    ),
    "X_JOB_KEY_REQUIRED": "Pass `key=` or declare the job with a key function.",
    "X_JOB_LEASE_LOST": (
        "Nothing in the body: the job was reclaimed after its lease lapsed. If it happens "
        "often, raise `--lease` or heartbeat from long bodies."
    ),
    "X_JOB_NOT_CANCELLABLE": "Nothing: the job already finished.",
    "X_JOB_NOT_FOUND": "Check the id (`ujobs jobs list`); it may have been purged by retention.",
    "X_JOB_NOT_PROMOTABLE": "Nothing: the job is not delayed.",
    "X_JOB_NOT_REGISTERED": (
        "Deploy the job's code to the workers (or the `--app` the command names); a worker "
        "gives unknown names back for another."
    ),
    "X_JOB_NOT_REMOVABLE": "Cancel the job first, then remove it.",
    "X_JOB_NOT_REQUEUEABLE": "Wait until it finishes, or cancel it first.",
    "X_JOB_OPTION_INVALID": (
        "Fix the option the detail names: finite and within its documented range."
    ),
    "X_JOB_PAGE_INVALID": "Pass the `next_cursor` the same listing answered, unchanged.",
    "X_JOB_RECORD_INVALID": (
        "A driver bug or a hand-built record: build records with the public API."
    ),
    "X_JOB_REQUEUE_DUPLICATE": "Finish or cancel the live job holding the key, then requeue.",
    "X_JOB_REQUEUE_UNWOUND": "Enqueue it fresh (a new key): its effects were compensated.",
    "X_JOB_RESULT_INVALID": (
        "Return JSON values within the bound; store large data elsewhere and return a reference."
    ),
    "X_JOB_SLOT_LOST": "Nothing: the run is retried; if frequent, check the store's health.",
    "X_JOB_TENANT_REQUIRED": (
        "Pass the tenant, or make the job's `tenant=` function find it in the input."
    ),
    "X_JOB_TENANT_MISMATCH": (
        "Put the tenant the run acts for in the input, as the declaration expects. From a "
        "body, `send_event` and an enqueue's `tenant_id=` name only the run's own tenant: to "
        "reach another org, say so in code (`with acting_for(org): ...`) or broadcast an "
        "event (`all_tenants=True`)."
    ),
    "X_JOB_WAIT_CYCLE": (
        "Do not gather or await a job that waits (`after=`, or its own gather) for this run: "
        "enqueue the child without `after=[ctx.job_id]`, or split the work so the waits go one "
        "way (the detail names the job that waits for this one)."
    ),
    "X_JOB_TERMINAL": "Read the error in `ujobs jobs show ID`; fix the cause and requeue by hand.",
    "X_JOB_EXECUTOR_INVALID": (
        'Give `executor="process"` a plain top-level `def` body that takes its input and a '
        "`ProcessContext` (no `ctx.step`, no `step_timeout`/`event_poll`), or drop the option."
    ),
    "X_JOB_PROCESS_DIED": (
        "Read the exit code or signal in the message: a segfault, `os._exit` or the OOM killer "
        "ended the body's process. The attempt is retried in a fresh process."
    ),
    "X_JOB_TIMEOUT": "Raise the job's `timeout=`, or make the body faster or split it into steps.",
    "X_LEDGER_ACCOUNT_INVALID": "Use a short account name of letters, digits and `:._-`.",
    "X_LEDGER_AMOUNT_INVALID": "Pass whole minor units (cents) as int, within the bound.",
    "X_LEDGER_CURRENCY_INVALID": "Use an ISO 4217 code such as `EUR`.",
    "X_LEDGER_LINES_INVALID": "Pass two or more lines, each account once.",
    "X_LEDGER_POSTING_CONFLICT": "Use a new key: this one was posted with other lines.",
    "X_LEDGER_UNBALANCED": "Make each currency's lines sum to zero.",
    "X_LOCK_LOST": "Nothing: the work was cancelled; it runs again under the lock.",
    "X_LOCK_TIMEOUT": "Raise the wait, or look for a holder that keeps the lock too long.",
    "X_RATE_LIMITED": "Nothing: the job runs when the limit allows.",
    "X_RESULT_FAILED": "Read why with `ujobs jobs show ID`; the job did not complete.",
    "X_RESULT_TIMEOUT": "Wait longer, or check a worker runs the job's queue.",
    "X_STEP_COMPENSATION_FAILED": "Fix the compensation; the unwind is retried.",
    "X_STEP_DUPLICATE": "Give each step in a run its own name.",
    "X_STEP_NAME_INVALID": "Use a short printable step name.",
    "X_STEP_OUTPUT_INVALID": "Return JSON values within the bound from the step.",
    "X_STEP_TIMEOUT": "Raise the step's timeout, or make it faster.",
    "X_SYNC_CALL_IN_LOOP": (
        "In async code (an `async def` view or body, `python -m asyncio`), await the method "
        "without `_sync`; the `_sync` forms are for code with no event loop of its own."
    ),
    "X_TASK_CRON_INVALID": "Fix the cron: 5 fields (minute first), or 6 with seconds first.",
    "X_TASK_TZ_INVALID": "Name an IANA zone such as `Europe/Paris`.",
    "X_WORKER_ERROR": "A bug around the body: report it with the worker's log line.",
    "X_WEBHOOK_BODY_INVALID": (
        "The sender's body is not storable JSON: ask the sender, or reject it."
    ),
    "X_WEBHOOK_BODY_TOO_LARGE": "Raise the receiver's `max_bytes` if the sender is trusted.",
    "X_WEBHOOK_CONTENT_TYPE_INVALID": "Send `application/json`.",
    "X_WEBHOOK_EVENT_ID_INVALID": "Check the sender's event-id header and the receiver's pattern.",
    "X_WEBHOOK_REQUEST_INVALID": "Send a POST with a body and its length.",
    "X_WEBHOOK_SIGNATURE_INVALID": (
        "Check the signing secret on both sides and that nothing rewrote the body."
    ),
    "X_WEBHOOK_TENANT_INVALID": "Check the route's tenant function finds a tenant in the event.",
    "X_WEBHOOK_DELIVERY_FAILED": (
        "Nothing: the delivery is retried; check the endpoint if it persists."
    ),
    "X_WEBHOOK_ENDPOINT_DISABLED": "Fix the endpoint, then enable it again (`ujobs webhooks`).",
    "X_WEBHOOK_ENDPOINT_UNKNOWN": "Check the endpoint id and tenant (`ujobs webhooks list`).",
    "X_WEBHOOK_EVENT_INVALID": "Send a JSON event within the bound.",
    "X_WEBHOOK_REJECTED": (
        "The endpoint refused it (4xx): fix the payload or the endpoint's config."
    ),
    "X_WEBHOOK_URL_REFUSED": "Use a public https URL (private and loopback addresses are refused).",
}


def what_to_do(code: str) -> str | None:
    """The advice for `code`: its own, else its family's; None when neither exists."""
    if code in BY_CODE:
        return BY_CODE[code]
    for suffix, advice in BY_SUFFIX.items():
        if code.endswith(suffix):
            return advice
    return None
