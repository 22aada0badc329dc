"""A gathered round of statements (an ack, a claim) on libpq directly: one pipeline, one Sync.

psycopg's cursors cost a round more Python than the rest of its job's run together (docs/pg.md,
"The client's CPU a job at concurrency 10"): a cursor, a lock and a prepared-statement lookup
per statement, a pipeline object and its queues, the answers copied onto each cursor. The round
below keeps what those did for the driver — psycopg's own dumpers (`Transformer`), its waiting
(`AsyncConnection.wait`: the cancel sent to the server and the answers read in when the caller
is cancelled), its errors by SQLSTATE — and does the rest itself: the statements prepared once
a connection under names of ours, sent, synced and read in one generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import psycopg
import psycopg.errors
from psycopg import pq
from psycopg.abc import PQGen
from psycopg.adapt import PyFormat, Transformer
from psycopg.generators import fetch_many, send

_TUPLES_OK: Final = pq.ExecStatus.TUPLES_OK
_COMMAND_OK: Final = pq.ExecStatus.COMMAND_OK
_FATAL_ERROR: Final = pq.ExecStatus.FATAL_ERROR
_PIPELINE_SYNC: Final = pq.ExecStatus.PIPELINE_SYNC
_BAD: Final = pq.ConnStatus.BAD
_IDLE: Final = pq.TransactionStatus.IDLE
_PIPELINE_OFF: Final = pq.PipelineStatus.OFF
#: Every parameter in the format psycopg picks for it, as a raw cursor binds them.
_AUTO: Final = PyFormat.AUTO


class Session:
    """What rounds keep of one connection: its dumpers and loaders, and the statements they
    prepared there by (text, parameter types). Its holder drops it with the connection (it
    holds the connection: psycopg's `Transformer` does)."""

    __slots__ = ("count", "names", "tx")

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.tx = Transformer(conn)
        self.names: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        #: Names are never reused: a Parse whose answer was not read may still have landed.
        self.count = 0

    def forget(self) -> None:
        """The server may have dropped every statement prepared here (psycopg deallocates them
        all when it rolls a transaction back): the next rounds prepare theirs again, under new
        names."""
        self.names.clear()


class Round:
    """Statements sent as one pipeline and one Sync, so one implicit transaction: all commit
    together or none does. `results` fills in as the answers are read, so a caller cancelled
    meanwhile (psycopg reads the answers in after its cancel) still finds them."""

    __slots__ = ("_conn", "_parsed", "_pgconn", "_prepare", "_session", "_slots", "results")

    def __init__(
        self,
        conn: psycopg.AsyncConnection[Any],
        prepare: bool,
        sessions: dict[psycopg.AsyncConnection[Any], Session],
    ) -> None:
        session = sessions.get(conn)
        if session is None:
            session = sessions[conn] = Session(conn)
        self._conn = conn
        self._pgconn = conn.pgconn
        self._session = session
        #: Statements go prepared (under names of ours), or each with its text.
        self._prepare = prepare
        #: Per statement sent, the place of its answer in `results`.
        self._slots: list[int] = []
        #: (place of a Parse's answer, its key, its name): recorded once answered OK.
        self._parsed: list[tuple[int, tuple[bytes, tuple[int, ...]], bytes]] = []
        self.results: list[list[pq.abc.PGresult]] = []

    async def run(self, statements: Sequence[tuple[bytes, Sequence[Any]]]) -> None:
        """Send `statements` (each a text with `$n` placeholders and its arguments, bound as
        psycopg's raw cursor binds them) and a Sync; read every answer in (`results`). Raises
        psycopg's error of the first statement that failed (the transaction rolled back) or
        of the connection lost. Cancelled, psycopg cancels it on the server and reads the
        answers in before it re-raises: `answered` then says whether it committed."""
        pgconn = self._pgconn
        pgconn.enter_pipeline_mode()
        error: BaseException | None = None
        try:
            for query, args in statements:
                self._send(query, args)
            pgconn.pipeline_sync()
            await self._conn.wait(self._answers())
        except BaseException as exc:
            error = exc
            raise
        finally:
            self._leave(error)
            self._record_parsed()
        failed = self._failed()
        if failed is not None:
            raise failed

    def _send(self, query: bytes, args: Sequence[Any]) -> None:
        session = self._session
        tx = session.tx
        if args:
            params = tx.dump_sequence(args, [_AUTO] * len(args))
            types: tuple[int, ...] = tx.types or ()
            formats = tx.formats
        else:
            params, types, formats = None, (), None
        pgconn = self._pgconn
        n = len(self._slots) + len(self._parsed)
        if not self._prepare:
            pgconn.send_query_params(query, params, types, formats)
            self._slots.append(n)
            return
        key = (query, types)
        name = session.names.get(key)
        if name is None:
            session.count += 1
            name = b"_ujobs_%d" % session.count
            pgconn.send_prepare(name, query, types)
            self._parsed.append((n, key, name))
            n += 1
        pgconn.send_query_prepared(name, params, formats)
        self._slots.append(n)

    def _answers(self) -> PQGen[None]:
        pgconn = self._pgconn
        yield from send(pgconn)
        results = self.results
        while True:
            got = yield from fetch_many(pgconn)
            if not got:
                raise psycopg.OperationalError("the session ended before its answers came")
            results.append(got)
            if got[0].status == _PIPELINE_SYNC:
                return

    def _leave(self, error: BaseException | None) -> None:
        pgconn = self._pgconn
        if pgconn.status == _BAD or pgconn.pipeline_status == _PIPELINE_OFF:
            return
        try:
            pgconn.exit_pipeline_mode()
        except psycopg.OperationalError:
            # Answers left unread (psycopg gave up on them after a cancel): the session is
            # of no more use, and closed says so to the caller and the pool.
            pgconn.finish()
            if error is None:
                raise

    def _record_parsed(self) -> None:
        results = self.results
        names = self._session.names
        for n, key, name in self._parsed:
            if n < len(results) and results[n][0].status == _COMMAND_OK:
                names[key] = name
        self._parsed.clear()

    def _failed(self) -> psycopg.Error | None:
        if self._pgconn.status == _BAD:
            return psycopg.OperationalError("the connection was lost")
        for got in self.results:
            for res in got:
                if res.status == _FATAL_ERROR:
                    return psycopg.errors.error_from_result(res, encoding=self._conn.info.encoding)
        return None

    def answered(self) -> bool:
        """Whether every statement succeeded and the transaction ended: its commit happened."""
        results = self.results
        ok = (_TUPLES_OK, _COMMAND_OK)
        return (
            bool(results)
            and results[-1][0].status == _PIPELINE_SYNC
            and self._conn.info.transaction_status == _IDLE
            and all(results[n][0].status in ok for n in self._slots)
        )

    def rows(self, i: int) -> list[tuple[Any, ...]]:
        """The rows the `i`-th statement sent answered (none for a command)."""
        res = self.results[self._slots[i]][-1]
        if res.status != _TUPLES_OK or not res.ntuples:
            return []
        tx = self._session.tx
        tx.set_pgresult(res)
        return tx.load_rows(0, res.ntuples, tuple)
