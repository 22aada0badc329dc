"""Every refusal this library makes: one table of stable `X_*` codes and their typed exceptions.

A driver translates its native failures at its own edge into these classes, so a caller sees the
same code whatever the backend. `error_for(code)` is the one way to turn a code into its class.
"""

from __future__ import annotations

import math
from typing import ClassVar, Final

#: code -> one-line title. The single list of codes; a class below exists for each.
CODES: Final[dict[str, str]] = {
    "X_ABORTED": "the run was cancelled or lost its claim; it records nothing more",
    "X_BACKFILL_BATCH_FAILED": "a batch failed: its source or its handle raised",
    "X_BACKFILL_COMPLETED": "this sweep already completed here (same declaration and scope)",
    "X_BACKFILL_DECLARATION_INVALID": "the backfill declaration is not valid",
    "X_BACKFILL_ENVIRONMENT": "the sweep is not declared for this environment",
    "X_BACKFILL_PAGE_INVALID": "the source answered a page or cursor the sweep cannot use",
    "X_BACKFILL_REQUIRES_PENDING": "a sweep this one requires has not completed here",
    "X_BACKFILL_SCOPE_INVALID": "the sweep would act outside the tenant it runs for",
    "X_BACKFILL_STALLED": "the sweep ended with fewer rows than its declaration expects",
    "X_CLI_DRIVER_REQUIRED": "no driver was named, and the CLI does not pick one on its own",
    "X_CLI_EXTRA_MISSING": "the command needs an extra that is not installed",
    "X_CLI_MODULE_INVALID": "the jobs module could not be imported",
    "X_CLI_NO_JOBS": "the module exports no jobs",
    "X_CLI_USAGE_INVALID": "the command line is not valid",
    "X_CONSUMER_CURSOR_MOVED": "another turn moved the consumer's cursor first; this run ends",
    "X_CONSUMER_DECLARATION_INVALID": "the consumer declaration is not valid",
    "X_CONSUMER_SELF_ENQUEUE": "a consumer never enqueues itself: its supervisor task does",
    "X_CONSUMER_SOURCE_INVALID": "the consumer's source answered records or a cursor it cannot use",
    "X_DASHBOARD_AUTH_REQUIRED": "the dashboard needs its token or user and password for this",
    "X_DASHBOARD_CSRF_INVALID": "the action did not carry this dashboard's token against forgery",
    "X_DASHBOARD_READ_ONLY": "the dashboard is read-only: it acts only with credentials set",
    "X_DASHBOARD_REQUEST_INVALID": "no such dashboard page or action, or an unreadable request",
    "X_DRAINING": "the worker is draining; the run was aborted and its claim handed back",
    "X_DRIVER_CANCELLED": "the store cancelled the statement (a statement timeout or a cancel)",
    "X_DRIVER_CAPABILITY_MISSING": "the driver does not declare the family this needs",
    "X_DRIVER_CONFLICT": "the store kept aborting the call in a deadlock or serialization conflict",
    "X_DRIVER_ERROR": "the store answered with an error this library does not expect",
    "X_DRIVER_LIMIT": "the store refused a value past one of its own limits or out of its range",
    "X_DRIVER_NOT_INSTALLED": "the driver for this URL needs an extra that is not installed",
    "X_DRIVER_SCHEMA_MISSING": "the store's jobs schema is not installed or is behind this version",
    "X_DRIVER_UNAVAILABLE": "the store could not be reached or went away during the call",
    "X_DRIVER_UNSUPPORTED": "the driver does not offer this capability",
    "X_DRIVER_URL_INVALID": "the driver URL names no known backend or is malformed",
    "X_EXPORT_COMPLETED": "a completed run of the same export (declaration and input) blocks it",
    "X_EXPORT_DECLARATION_INVALID": "the export declaration is not valid",
    "X_EXPORT_PAGE_INVALID": "the query or pages answered a page or cursor the export cannot use",
    "X_EXPORT_SCOPE_INVALID": "the export would read or write outside the tenant it runs for",
    "X_EXPORT_SINK_INVALID": "the export's sink cannot be written",
    "X_IMPORT_COMPLETED": "a completed run of the same import (declaration and input) blocks it",
    "X_IMPORT_DECLARATION_INVALID": "the import declaration is not valid",
    "X_IMPORT_HEADER_INVALID": "the CSV header is unreadable, or has an empty or repeated name",
    "X_IMPORT_RECORD_INVALID": "a record of the import could not be read or was refused",
    "X_IMPORT_RECORD_TOO_LARGE": "a record of the import is longer than max_record_bytes",
    "X_IMPORT_SCOPE_INVALID": "the import would read outside the tenant it runs for",
    "X_IMPORT_SOURCE_INVALID": "the import's source cannot be read",
    "X_JOB_BATCH_TOO_LARGE": "the batch holds more records than one call accepts",
    "X_JOB_CANCELLED": "the job was cancelled while it ran",
    "X_JOB_CLAIM_QUEUES_EMPTY": "a claim must name at least one queue",
    "X_JOB_CONCURRENCY_KEY_INVALID": "the concurrency key could not be derived from the input",
    "X_JOB_CONCURRENCY_UNENFORCEABLE": "a job declares a fleet-wide limit its driver cannot hold",
    "X_JOB_DECLARATION_INVALID": "the job declaration is not valid",
    "X_JOB_DEPENDENCY_FAILED": "a job it depends on ended dead, failed or cancelled",
    "X_JOB_DEPENDENCY_UNKNOWN": "a job it depends on does not exist",
    "X_JOB_DUPLICATE": "a different job is already registered under this name",
    "X_JOB_INPUT_INVALID": "the value has no JSON form",
    "X_JOB_KEY_REQUIRED": "an idempotency key is required and none was given",
    "X_JOB_LEASE_LOST": "the claim on this job is no longer held",
    "X_JOB_NOT_CANCELLABLE": "the job is finished and cannot be cancelled",
    "X_JOB_NOT_FOUND": "no job has this id",
    "X_JOB_NOT_PROMOTABLE": "the job is not waiting for a later time, so it cannot be promoted",
    "X_JOB_NOT_REGISTERED": "no job is registered under this name",
    "X_JOB_NOT_REMOVABLE": "the job is running; cancel it before removing it",
    "X_JOB_NOT_REQUEUEABLE": "the job is still live and cannot be requeued",
    "X_JOB_OPTION_INVALID": "an option is not finite or out of its range",
    "X_JOB_PAGE_INVALID": "the page cursor is malformed or was made for another listing",
    "X_JOB_RECORD_INVALID": "a record handed to the driver is not valid",
    "X_JOB_REQUEUE_DUPLICATE": "another live job holds this job's idempotency key",
    "X_JOB_REQUEUE_UNWOUND": "the job's run failed for good and is undone: requeue it fresh",
    "X_JOB_RESULT_INVALID": "the body's result cannot be stored (no JSON form, or past a bound)",
    "X_JOB_SLOT_LOST": "the run's fleet-wide concurrency slot was lost; the run was cancelled",
    "X_JOB_TENANT_REQUIRED": "the job's tenant is required and could not be derived",
    "X_JOB_TERMINAL": "the job body failed with an error marked terminal",
    "X_JOB_TIMEOUT": "the run passed its deadline and was cancelled",
    "X_JOB_WAIT_CYCLE": "the wait would close a cycle: a job it waits for waits for it",
    "X_LEDGER_ACCOUNT_INVALID": "an account name is not one a ledger can hold",
    "X_LEDGER_AMOUNT_INVALID": "an amount is not a whole number of minor units within the bound",
    "X_LEDGER_CURRENCY_INVALID": "a currency code is not one a ledger can hold",
    "X_LEDGER_DECLARATION_INVALID": "the ledger declaration is not valid",
    "X_LEDGER_LINES_INVALID": "a posting's lines are malformed, too few, too many or repeated",
    "X_LEDGER_POSTING_CONFLICT": "this key was already posted with other lines",
    "X_LEDGER_SCOPE_INVALID": "the posting would land in another tenant's ledger",
    "X_LEDGER_UNBALANCED": "a posting's lines do not sum to zero in every currency",
    "X_LOCK_LOST": "the lock was lost while held; what it guarded was cancelled",
    "X_LOCK_TIMEOUT": "the lock could not be taken in time",
    "X_PURGE_DECLARATION_INVALID": "the purge declaration is not valid",
    "X_RATE_LIMITED": "the job was deferred by a rate limit",
    "X_RESULT_FAILED": "the job finished without completing: dead, failed or cancelled",
    "X_RESULT_TIMEOUT": "the job did not finish before the wait for its result timed out",
    "X_SYNC_CALL_IN_LOOP": "a `_sync` method was called from a running event loop",
    "X_STEP_COMPENSATION_FAILED": "a compensation raised while a failed run was undone",
    "X_STEP_DUPLICATE": "a step name is used twice in one run",
    "X_STEP_NAME_INVALID": "a step name is not one the store can record",
    "X_STEP_OUTPUT_INVALID": "the step's output cannot be stored (no JSON form, or past a bound)",
    "X_STEP_TIMEOUT": "the step passed its deadline and was cancelled",
    "X_TASK_CRON_INVALID": "the task's cron expression is not valid",
    "X_TASK_DECLARATION_INVALID": "the task declaration is not valid",
    "X_TASK_TZ_INVALID": "the task's time zone is missing or unknown",
    "X_WORKER_ERROR": "the worker failed around the body, not in it",
    # -- webhook receiver --
    "X_WEBHOOK_BODY_INVALID": "the verified body is not JSON that every store can hold",
    "X_WEBHOOK_BODY_TOO_LARGE": "the request body is longer than the receiver's max_bytes",
    "X_WEBHOOK_CONTENT_TYPE_INVALID": "the request's content type is not one the receiver reads",
    "X_WEBHOOK_EVENT_ID_INVALID": "the verified event id is missing or not of the pattern",
    "X_WEBHOOK_RECEIVER_DECLARATION_INVALID": "the webhook receiver declaration is not valid",
    "X_WEBHOOK_REQUEST_INVALID": "the request is not one the receiver reads (method or length)",
    "X_WEBHOOK_SIGNATURE_INVALID": "the delivery's signature did not verify",
    "X_WEBHOOK_TENANT_INVALID": "no tenant the route may act for could be derived from the event",
    # -- webhooks --
    "X_JOB_TENANT_MISMATCH": "the input names no org, or not the one the run acts for",
    "X_WEBHOOK_DECLARATION_INVALID": "the webhook declaration is not valid",
    "X_WEBHOOK_DELIVERY_FAILED": "the endpoint did not answer 2xx; the delivery is retried",
    "X_WEBHOOK_ENDPOINT_DISABLED": "the endpoint is disabled after failing in a row",
    "X_WEBHOOK_ENDPOINT_UNKNOWN": "no such webhook endpoint for this tenant",
    "X_WEBHOOK_EVENT_INVALID": "the webhook event is not one that can be sent",
    "X_WEBHOOK_REJECTED": "the endpoint refused the delivery with a 4xx or a redirect",
    "X_WEBHOOK_URL_REFUSED": "the endpoint URL is not one a webhook may be sent to",
    # -- process executor --
    "X_JOB_EXECUTOR_INVALID": "the job's body cannot run on the executor it declares",
    "X_JOB_PROCESS_DIED": "the body's process died before it answered; the attempt failed",
}


def shown(value: object, limit: int = 120) -> str:
    """`value` as code would spell it, cut to `limit` characters, for a refusal's text (a NUL
    or a lone surrogate stays printable); one `repr` cannot spell — an int past Python's 4,300
    digits, a list nested past the recursion limit — by its type, so the refusal stays typed."""
    try:
        return repr(value)[:limit]
    except (ValueError, RecursionError):
        return f"<{type(value).__name__}>"


class JobsError(Exception):
    """A refusal of the jobs library."""

    code: ClassVar[str] = "X_DRIVER_ERROR"
    #: True when a job body raising this error must not be retried.
    terminal: ClassVar[bool] = False

    def __init__(self, message: str | None = None, *, detail: str | None = None) -> None:
        self.detail = detail
        self.title = CODES[self.code]
        text = message or (self.__doc__ or self.title).strip().splitlines()[0]
        if detail is not None:
            text = f"{text} ({detail})"
        self.message = text
        super().__init__(f"{self.code}: {text}")


class AbortedError(JobsError):
    """The run was cancelled or lost its claim; it records nothing more."""

    code = "X_ABORTED"


class CliDriverRequiredError(JobsError):
    """No driver was named, and the CLI does not pick one on its own."""

    code = "X_CLI_DRIVER_REQUIRED"


class CliExtraMissingError(JobsError):
    """The command needs an extra that is not installed."""

    code = "X_CLI_EXTRA_MISSING"


class CliModuleInvalidError(JobsError):
    """The jobs module could not be imported."""

    code = "X_CLI_MODULE_INVALID"


class CliNoJobsError(JobsError):
    """The module exports no jobs."""

    code = "X_CLI_NO_JOBS"


class CliUsageInvalidError(JobsError):
    """The command line is not valid."""

    code = "X_CLI_USAGE_INVALID"


class DashboardAuthRequiredError(JobsError):
    """The dashboard needs its token or user and password for this."""

    code = "X_DASHBOARD_AUTH_REQUIRED"


class DashboardCsrfError(JobsError):
    """The action did not carry this dashboard's token against forgery."""

    code = "X_DASHBOARD_CSRF_INVALID"


class DashboardReadOnlyError(JobsError):
    """The dashboard is read-only: it acts only with credentials set."""

    code = "X_DASHBOARD_READ_ONLY"


class DashboardRequestInvalidError(JobsError):
    """No such dashboard page or action, or an unreadable request."""

    code = "X_DASHBOARD_REQUEST_INVALID"


class DrainingError(JobsError):
    """The worker is draining; the run was aborted and its claim handed back."""

    code = "X_DRAINING"


class DriverCancelledError(JobsError):
    """The store cancelled the statement (a statement timeout or a cancel)."""

    code = "X_DRIVER_CANCELLED"


class DriverConflictError(JobsError):
    """The store kept aborting the call in a deadlock or serialization conflict."""

    code = "X_DRIVER_CONFLICT"


class DriverError(JobsError):
    """The store answered with an error this library does not expect."""

    code = "X_DRIVER_ERROR"


class DriverSchemaMissingError(DriverError):
    """The store's jobs schema is not installed or is behind this version."""

    code = "X_DRIVER_SCHEMA_MISSING"


class DriverLimitError(JobsError):
    """The store refused a value past one of its own limits or out of its range."""

    code = "X_DRIVER_LIMIT"


class DriverNotInstalledError(JobsError):
    """The driver for this URL needs an extra that is not installed."""

    code = "X_DRIVER_NOT_INSTALLED"


class DriverUnsupportedError(JobsError):
    """The driver does not offer this capability."""

    code = "X_DRIVER_UNSUPPORTED"


class CapabilityMissingError(DriverUnsupportedError):
    """The driver does not declare the family this needs."""

    code = "X_DRIVER_CAPABILITY_MISSING"
    #: A body that needs a family its driver lacks fails the same way on every attempt.
    terminal = True

    @property
    def capability(self) -> str:
        """The `Capabilities` flag of the family missing (the error's detail)."""
        return self.detail or ""


class DriverUnavailableError(JobsError):
    """The store could not be reached or went away during the call."""

    code = "X_DRIVER_UNAVAILABLE"


class DriverUrlInvalidError(JobsError):
    """The driver URL names no known backend or is malformed."""

    code = "X_DRIVER_URL_INVALID"


class BatchTooLargeError(JobsError):
    """The batch holds more records than one call accepts."""

    code = "X_JOB_BATCH_TOO_LARGE"


class JobCancelledError(JobsError):
    """The job was cancelled while it ran."""

    code = "X_JOB_CANCELLED"


class ClaimQueuesEmptyError(JobsError):
    """A claim must name at least one queue."""

    code = "X_JOB_CLAIM_QUEUES_EMPTY"


class ConcurrencyKeyError(JobsError):
    """The concurrency key could not be derived from the input."""

    code = "X_JOB_CONCURRENCY_KEY_INVALID"


class ConcurrencyUnenforceableError(JobsError):
    """A job declares a fleet-wide limit its driver cannot hold."""

    code = "X_JOB_CONCURRENCY_UNENFORCEABLE"


class DeclarationInvalidError(JobsError):
    """The job declaration is not valid."""

    code = "X_JOB_DECLARATION_INVALID"


class JobDuplicateError(JobsError):
    """A different job is already registered under this name."""

    code = "X_JOB_DUPLICATE"


class InputInvalidError(JobsError):
    """The value has no JSON form."""

    code = "X_JOB_INPUT_INVALID"


class KeyRequiredError(JobsError):
    """An idempotency key is required and none was given."""

    code = "X_JOB_KEY_REQUIRED"


class LeaseLostError(JobsError):
    """The claim on this job is no longer held."""

    code = "X_JOB_LEASE_LOST"


class NotCancellableError(JobsError):
    """The job is finished and cannot be cancelled."""

    code = "X_JOB_NOT_CANCELLABLE"


class JobNotFoundError(JobsError):
    """No job has this id."""

    code = "X_JOB_NOT_FOUND"


class NotPromotableError(JobsError):
    """The job is not waiting for a later time, so it cannot be promoted."""

    code = "X_JOB_NOT_PROMOTABLE"


class NotRemovableError(JobsError):
    """The job is running; cancel it before removing it."""

    code = "X_JOB_NOT_REMOVABLE"


class PageInvalidError(JobsError):
    """The page cursor is malformed or was made for another listing."""

    code = "X_JOB_PAGE_INVALID"


class JobNotRegisteredError(JobsError):
    """No job is registered under this name."""

    code = "X_JOB_NOT_REGISTERED"
    terminal = True


class NotRequeueableError(JobsError):
    """The job is still live and cannot be requeued."""

    code = "X_JOB_NOT_REQUEUEABLE"


class OptionInvalidError(JobsError):
    """An option is not finite or out of its range."""

    code = "X_JOB_OPTION_INVALID"


class RecordInvalidError(JobsError):
    """A record handed to the driver is not valid."""

    code = "X_JOB_RECORD_INVALID"


class RequeueDuplicateError(JobsError):
    """Another live job holds this job's idempotency key."""

    code = "X_JOB_REQUEUE_DUPLICATE"


class RequeueUnwoundError(JobsError):
    """The job's run failed for good and is undone: requeue it fresh."""

    # A saga run that failed for good has its compensations run by its `ujobs.unwind` job; a
    # plain requeue would replay its recorded steps (their effects undone, or being undone) and
    # end `completed` having done nothing. A fresh requeue starts a new run: the message names
    # the ways to ask for one.
    code = "X_JOB_REQUEUE_UNWOUND"

    def __init__(self, message: str | None = None, *, detail: str | None = None) -> None:
        super().__init__(
            message
            or "its run failed for good and its steps are undone (or being undone): a plain"
            " requeue would replay them; requeue it as a fresh run instead"
            " (`ujobs jobs requeue --fresh ID`, the dashboard's requeue-fresh)",
            detail=detail,
        )


class ResultInvalidError(JobsError):
    """The body's result cannot be stored (no JSON form, or past a bound)."""

    code = "X_JOB_RESULT_INVALID"
    # The same result would not be storable next time either, and a re-run repeats side effects.
    terminal = True


class SlotLostError(JobsError):
    """The run's fleet-wide concurrency slot was lost; the run was cancelled."""

    code = "X_JOB_SLOT_LOST"


class TenantRequiredError(JobsError):
    """The job's tenant is required and could not be derived."""

    code = "X_JOB_TENANT_REQUIRED"


class TerminalError(JobsError):
    """The job body failed with an error marked terminal."""

    code = "X_JOB_TERMINAL"
    terminal = True


class JobTimeoutError(JobsError):
    """The run passed its deadline and was cancelled."""

    code = "X_JOB_TIMEOUT"


class LockLostError(JobsError):
    """The lock was lost while held; what it guarded was cancelled."""

    code = "X_LOCK_LOST"


class LockTimeoutError(JobsError):
    """The lock could not be taken in time."""

    code = "X_LOCK_TIMEOUT"


class RateLimitedError(JobsError):
    """The job was deferred by a rate limit."""

    code = "X_RATE_LIMITED"

    def __init__(
        self,
        message: str | None = None,
        *,
        detail: str | None = None,
        retry_after_ms: float = 1000,
    ) -> None:
        """`retry_after_ms`: any finite number of ms >= 0 (kept as a whole number of ms; a
        worker defers a wait past the last time a store keeps, `MAX_TIME_MS`, to that time);
        anything else is refused here, where it is written, with `X_JOB_OPTION_INVALID`."""
        if (
            isinstance(retry_after_ms, bool)
            or not isinstance(retry_after_ms, int | float)
            # Compared as it is: a NaN fails, and an int past a float's range is never
            # converted (`math.isfinite` of one raises OverflowError).
            or not 0 <= retry_after_ms < math.inf
        ):
            raise OptionInvalidError(
                f"must be a finite number of ms >= 0, not {shown(retry_after_ms, 40)}",
                detail="retry_after_ms",
            )
        super().__init__(message, detail=detail)
        self.retry_after_ms = round(retry_after_ms)


class ResultFailedError(JobsError):
    """The job finished without completing: dead, failed or cancelled."""

    code = "X_RESULT_FAILED"
    # Waiting again answers the same: the row is finished for good.
    terminal = True

    def __init__(
        self,
        message: str | None = None,
        *,
        detail: str | None = None,
        job_id: str = "",
        state: str = "",
        error: str | None = None,
    ) -> None:
        """`job_id`, its final `state` and its `last_error` (None when it holds none)."""
        super().__init__(message, detail=detail)
        self.job_id = job_id
        self.state = state
        self.error = error


class SyncCallInLoopError(JobsError, RuntimeError):
    """A `_sync` method was called from a running event loop."""

    code = "X_SYNC_CALL_IN_LOOP"


class ResultTimeoutError(JobsError):
    """The job did not finish before the wait for its result timed out."""

    code = "X_RESULT_TIMEOUT"


class DependencyFailedError(JobsError):
    """A job it depends on ended dead, failed or cancelled."""

    code = "X_JOB_DEPENDENCY_FAILED"
    # The dependency is finished for good: running again would meet it again.
    terminal = True


class DependencyUnknownError(JobsError):
    """A job it depends on does not exist."""

    code = "X_JOB_DEPENDENCY_UNKNOWN"


class WaitCycleError(JobsError):
    """The wait would close a cycle: a job it waits for waits for it."""

    code = "X_JOB_WAIT_CYCLE"
    # The jobs it would wait for still wait for it: a retry would close the same cycle.
    terminal = True


class StepDuplicateError(JobsError):
    """A step name is used twice in one run."""

    code = "X_STEP_DUPLICATE"
    # The body's code uses one name twice: the next attempt would do the same.
    terminal = True


class StepNameInvalidError(JobsError):
    """A step name is not one the store can record."""

    code = "X_STEP_NAME_INVALID"
    # Refused before the step runs, and the body's code names it the same way next time.
    terminal = True


class StepOutputInvalidError(JobsError):
    """The step's output cannot be stored (no JSON form, or past a bound)."""

    code = "X_STEP_OUTPUT_INVALID"
    # The step ran and its output would not be storable next time either: a retry would only
    # repeat its side effect.
    terminal = True


class CompensationError(JobsError):
    """A compensation raised while a failed run was undone."""

    code = "X_STEP_COMPENSATION_FAILED"


class StepTimeoutError(JobsError):
    """The step passed its deadline and was cancelled."""

    code = "X_STEP_TIMEOUT"


class TaskCronInvalidError(JobsError):
    """The task's cron expression is not valid."""

    code = "X_TASK_CRON_INVALID"


class TaskDeclarationInvalidError(JobsError):
    """The task declaration is not valid."""

    code = "X_TASK_DECLARATION_INVALID"


class TaskTzInvalidError(JobsError):
    """The task's time zone is missing or unknown."""

    code = "X_TASK_TZ_INVALID"


class WorkerError(JobsError):
    """The worker failed around the body, not in it."""

    code = "X_WORKER_ERROR"


# -- the factories (`jobs_core.factories`) ----------------------------------------------------


class BackfillBatchFailedError(JobsError):
    """A batch failed: its source or its handle raised."""

    code = "X_BACKFILL_BATCH_FAILED"


class BackfillCompletedError(JobsError):
    """This sweep already completed here (same declaration and scope)."""

    code = "X_BACKFILL_COMPLETED"
    terminal = True


class BackfillDeclarationInvalidError(JobsError):
    """The backfill declaration is not valid."""

    code = "X_BACKFILL_DECLARATION_INVALID"


class BackfillEnvironmentError(JobsError):
    """The sweep is not declared for this environment."""

    code = "X_BACKFILL_ENVIRONMENT"
    terminal = True


class BackfillPageInvalidError(JobsError):
    """The source answered a page or cursor the sweep cannot use."""

    code = "X_BACKFILL_PAGE_INVALID"
    terminal = True


class BackfillRequiresPendingError(JobsError):
    """A sweep this one requires has not completed here."""

    code = "X_BACKFILL_REQUIRES_PENDING"
    terminal = True


class BackfillScopeInvalidError(JobsError):
    """The sweep would act outside the tenant it runs for."""

    code = "X_BACKFILL_SCOPE_INVALID"
    terminal = True


class BackfillStalledError(JobsError):
    """The sweep ended with fewer rows than its declaration expects."""

    code = "X_BACKFILL_STALLED"
    terminal = True


class ExportCompletedError(JobsError):
    """A completed run of the same export (declaration and input) blocks it."""

    code = "X_EXPORT_COMPLETED"
    terminal = True


class ExportDeclarationInvalidError(JobsError):
    """The export declaration is not valid."""

    code = "X_EXPORT_DECLARATION_INVALID"


class ExportPageInvalidError(JobsError):
    """The query or pages answered a page or cursor the export cannot use."""

    code = "X_EXPORT_PAGE_INVALID"
    terminal = True


class ExportScopeInvalidError(JobsError):
    """The export would read or write outside the tenant it runs for."""

    code = "X_EXPORT_SCOPE_INVALID"
    terminal = True


class ExportSinkInvalidError(JobsError):
    """The export's sink cannot be written."""

    code = "X_EXPORT_SINK_INVALID"


class ImportCompletedError(JobsError):
    """A completed run of the same import (declaration and input) blocks it."""

    code = "X_IMPORT_COMPLETED"
    terminal = True


class ImportDeclarationInvalidError(JobsError):
    """The import declaration is not valid."""

    code = "X_IMPORT_DECLARATION_INVALID"


class ImportHeaderInvalidError(JobsError):
    """The CSV header is unreadable, or has an empty or repeated name."""

    code = "X_IMPORT_HEADER_INVALID"
    terminal = True


class ImportRecordInvalidError(JobsError):
    """A record of the import could not be read or was refused."""

    code = "X_IMPORT_RECORD_INVALID"


class ImportRecordTooLargeError(JobsError):
    """A record of the import is longer than max_record_bytes."""

    code = "X_IMPORT_RECORD_TOO_LARGE"
    terminal = True


class ImportScopeInvalidError(JobsError):
    """The import would read outside the tenant it runs for."""

    code = "X_IMPORT_SCOPE_INVALID"
    terminal = True


class ImportSourceInvalidError(JobsError):
    """The import's source cannot be read."""

    code = "X_IMPORT_SOURCE_INVALID"


class PurgeDeclarationInvalidError(JobsError):
    """The purge declaration is not valid."""

    code = "X_PURGE_DECLARATION_INVALID"


# -- ledger (`jobs_core.factories.ledger`) ------------------------------------------------
# Every refusal of a posting is terminal: the same lines would be refused again, and a posting
# key already holding other lines never changes.


class LedgerAccountInvalidError(JobsError):
    """An account name is not one a ledger can hold."""

    code = "X_LEDGER_ACCOUNT_INVALID"
    terminal = True


class LedgerAmountInvalidError(JobsError):
    """An amount is not a whole number of minor units within the bound."""

    code = "X_LEDGER_AMOUNT_INVALID"
    terminal = True


class LedgerCurrencyInvalidError(JobsError):
    """A currency code is not one a ledger can hold."""

    code = "X_LEDGER_CURRENCY_INVALID"
    terminal = True


class LedgerDeclarationInvalidError(JobsError):
    """The ledger declaration is not valid."""

    code = "X_LEDGER_DECLARATION_INVALID"


class LedgerLinesInvalidError(JobsError):
    """A posting's lines are malformed, too few, too many or repeated."""

    code = "X_LEDGER_LINES_INVALID"
    terminal = True


class LedgerPostingConflictError(JobsError):
    """This key was already posted with other lines."""

    code = "X_LEDGER_POSTING_CONFLICT"
    terminal = True


class LedgerScopeInvalidError(JobsError):
    """The posting would land in another tenant's ledger."""

    code = "X_LEDGER_SCOPE_INVALID"
    terminal = True


class LedgerUnbalancedError(JobsError):
    """A posting's lines do not sum to zero in every currency."""

    code = "X_LEDGER_UNBALANCED"
    terminal = True


# -- consumers ------------------------------------------------------------------------------


class ConsumerCursorMovedError(JobsError):
    """Another turn moved the consumer's cursor first; this run ends."""

    code = "X_CONSUMER_CURSOR_MOVED"


class ConsumerDeclarationInvalidError(JobsError):
    """The consumer declaration is not valid."""

    code = "X_CONSUMER_DECLARATION_INVALID"


class ConsumerSelfEnqueueError(JobsError):
    """A consumer never enqueues itself: its supervisor task does."""

    code = "X_CONSUMER_SELF_ENQUEUE"


class ConsumerSourceInvalidError(JobsError):
    """The consumer's source answered records or a cursor it cannot use."""

    code = "X_CONSUMER_SOURCE_INVALID"
    terminal = True


# -- webhook receiver (`jobs_core.factories.webhooks`) --------------------------------------


class WebhookBodyInvalidError(JobsError):
    """The verified body is not JSON that every store can hold."""

    code = "X_WEBHOOK_BODY_INVALID"


class WebhookBodyTooLargeError(JobsError):
    """The request body is longer than the receiver's max_bytes."""

    code = "X_WEBHOOK_BODY_TOO_LARGE"


class WebhookContentTypeError(JobsError):
    """The request's content type is not one the receiver reads."""

    code = "X_WEBHOOK_CONTENT_TYPE_INVALID"


class WebhookEventIdInvalidError(JobsError):
    """The verified event id is missing or not of the pattern."""

    code = "X_WEBHOOK_EVENT_ID_INVALID"


class WebhookReceiverDeclarationInvalidError(JobsError):
    """The webhook receiver declaration is not valid."""

    code = "X_WEBHOOK_RECEIVER_DECLARATION_INVALID"


class WebhookRequestInvalidError(JobsError):
    """The request is not one the receiver reads (method or length)."""

    code = "X_WEBHOOK_REQUEST_INVALID"


class WebhookSignatureInvalidError(JobsError):
    """The delivery's signature did not verify."""

    code = "X_WEBHOOK_SIGNATURE_INVALID"


class WebhookTenantInvalidError(JobsError):
    """No tenant the route may act for could be derived from the event."""

    code = "X_WEBHOOK_TENANT_INVALID"


# -- webhooks --


class TenantMismatchError(JobsError):
    """The input names no org, or not the one the run acts for."""

    code = "X_JOB_TENANT_MISMATCH"
    terminal = True


class WebhookDeclarationInvalidError(JobsError):
    """The webhook declaration is not valid."""

    code = "X_WEBHOOK_DECLARATION_INVALID"
    # Raised in a body only when the declaration's secrets answered none it can sign with.
    terminal = True


class WebhookDeliveryFailedError(JobsError):
    """The endpoint did not answer 2xx; the delivery is retried."""

    code = "X_WEBHOOK_DELIVERY_FAILED"


class WebhookEndpointDisabledError(JobsError):
    """The endpoint is disabled after failing in a row."""

    code = "X_WEBHOOK_ENDPOINT_DISABLED"
    terminal = True


class WebhookEndpointUnknownError(JobsError):
    """No such webhook endpoint for this tenant."""

    code = "X_WEBHOOK_ENDPOINT_UNKNOWN"
    terminal = True


class WebhookEventInvalidError(JobsError):
    """The webhook event is not one that can be sent."""

    code = "X_WEBHOOK_EVENT_INVALID"
    terminal = True


class WebhookRejectedError(JobsError):
    """The endpoint refused the delivery with a 4xx or a redirect."""

    code = "X_WEBHOOK_REJECTED"
    terminal = True


class WebhookUrlRefusedError(JobsError):
    """The endpoint URL is not one a webhook may be sent to."""

    code = "X_WEBHOOK_URL_REFUSED"
    terminal = True


# -- process executor --


class ExecutorInvalidError(JobsError):
    """The job's body cannot run on the executor it declares."""

    code = "X_JOB_EXECUTOR_INVALID"


class ProcessDiedError(JobsError):
    """The body's process died before it answered; the attempt failed."""

    code = "X_JOB_PROCESS_DIED"


_CLASSES: Final[dict[str, type[JobsError]]] = {
    cls.code: cls
    for cls in (
        AbortedError,
        CliDriverRequiredError,
        CliModuleInvalidError,
        CliNoJobsError,
        CliUsageInvalidError,
        DrainingError,
        DriverCancelledError,
        CapabilityMissingError,
        DriverConflictError,
        DriverError,
        DriverLimitError,
        DriverNotInstalledError,
        DriverUnavailableError,
        DriverUnsupportedError,
        DriverUrlInvalidError,
        BatchTooLargeError,
        JobCancelledError,
        ClaimQueuesEmptyError,
        DeclarationInvalidError,
        JobDuplicateError,
        InputInvalidError,
        KeyRequiredError,
        LeaseLostError,
        NotCancellableError,
        JobNotFoundError,
        JobNotRegisteredError,
        NotPromotableError,
        NotRemovableError,
        NotRequeueableError,
        OptionInvalidError,
        PageInvalidError,
        RecordInvalidError,
        RequeueDuplicateError,
        RequeueUnwoundError,
        ResultInvalidError,
        TenantRequiredError,
        TerminalError,
        JobTimeoutError,
        RateLimitedError,
        ResultFailedError,
        ResultTimeoutError,
        DependencyFailedError,
        DependencyUnknownError,
        WaitCycleError,
        DriverSchemaMissingError,
        CompensationError,
        ConcurrencyKeyError,
        ConcurrencyUnenforceableError,
        SlotLostError,
        LockLostError,
        LockTimeoutError,
        StepDuplicateError,
        StepNameInvalidError,
        StepOutputInvalidError,
        StepTimeoutError,
        TaskCronInvalidError,
        TaskDeclarationInvalidError,
        TaskTzInvalidError,
        WorkerError,
        CliExtraMissingError,
        DashboardAuthRequiredError,
        DashboardCsrfError,
        DashboardReadOnlyError,
        DashboardRequestInvalidError,
        BackfillBatchFailedError,
        BackfillCompletedError,
        BackfillDeclarationInvalidError,
        BackfillEnvironmentError,
        BackfillPageInvalidError,
        BackfillRequiresPendingError,
        BackfillScopeInvalidError,
        BackfillStalledError,
        ExportCompletedError,
        ExportDeclarationInvalidError,
        ExportPageInvalidError,
        ExportScopeInvalidError,
        ExportSinkInvalidError,
        ImportCompletedError,
        ImportDeclarationInvalidError,
        ImportHeaderInvalidError,
        ImportRecordInvalidError,
        ImportRecordTooLargeError,
        ImportScopeInvalidError,
        ImportSourceInvalidError,
        PurgeDeclarationInvalidError,
        LedgerAccountInvalidError,
        LedgerAmountInvalidError,
        LedgerCurrencyInvalidError,
        LedgerDeclarationInvalidError,
        LedgerLinesInvalidError,
        LedgerPostingConflictError,
        LedgerScopeInvalidError,
        LedgerUnbalancedError,
        # -- consumers --
        ConsumerCursorMovedError,
        ConsumerDeclarationInvalidError,
        ConsumerSelfEnqueueError,
        ConsumerSourceInvalidError,
        # -- webhook receiver --
        WebhookBodyInvalidError,
        WebhookBodyTooLargeError,
        WebhookContentTypeError,
        WebhookEventIdInvalidError,
        WebhookReceiverDeclarationInvalidError,
        WebhookRequestInvalidError,
        WebhookSignatureInvalidError,
        WebhookTenantInvalidError,
        # -- webhooks --
        TenantMismatchError,
        WebhookDeclarationInvalidError,
        WebhookDeliveryFailedError,
        WebhookEndpointDisabledError,
        WebhookEndpointUnknownError,
        WebhookEventInvalidError,
        WebhookRejectedError,
        WebhookUrlRefusedError,
        # -- process executor --
        ExecutorInvalidError,
        ProcessDiedError,
        SyncCallInLoopError,
    )
}


def error_for(code: str, message: str | None = None, *, detail: str | None = None) -> JobsError:
    """The typed exception for `code`; an unknown code becomes `X_DRIVER_ERROR` naming it."""
    cls = _CLASSES.get(code)
    if cls is None:
        return DriverError(message or f"unknown error code {code}", detail=detail)
    return cls(message, detail=detail)


def error_class(code: str) -> type[JobsError]:
    """The class that carries `code` (KeyError for a code not in `CODES`)."""
    return _CLASSES[code]
