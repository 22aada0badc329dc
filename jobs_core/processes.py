"""Processes for `executor="process"` bodies: a `def` body run in a spawned child, killed for real.

A thread cannot be stopped from outside; a process can. Each child runs one body at a time and
is handed the body by reference (its module and qualified name, imported in the child), the
stored input as JSON text and a `ProcessContext`; it answers the result as JSON text (encoded
there, with the same checks as the worker's) or what the body raised. A run that ends while its
body still runs (its deadline, a cancel, a lost lease, a drain's abort) kills the child
(SIGKILL); a child that dies (a crash, `os._exit`, a signal) fails the body it ran
(`X_JOB_PROCESS_DIED`). Either way a fresh child takes its place when a body needs one.

Heartbeats, the fence and settles never cross: they stay in the worker. Children ignore SIGINT
and SIGTERM (the worker's drain decides when a body stops) and end with the worker: on `close`,
when their pipe to it closes, and on Linux when it dies (`PR_SET_PDEATHSIG`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import importlib
import inspect
import multiprocessing
import multiprocessing.util  # its exit hook joins every child: ours must be registered after it
import os
import pickle
import select
import signal
import socket
import struct
import sys
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_ready
from multiprocessing.process import BaseProcess
from typing import Any, Final

from jobs_core.context import JobContext
from jobs_core.errors import JobsError, ProcessDiedError, ResultInvalidError
from jobs_core.jsonform import dumps, loads
from jobs_core.tenant import acting_for
from jobs_core.threads import BodyThreads

#: How long `close` lets idle children exit on their own before it kills them.
CLOSE_GRACE_S: Final = 0.5
#: How long a child may take to start (a fresh interpreter importing the job modules) before it
#: is killed and the body waiting for it fails (a module that hangs on import must not hold a
#: job, leased, forever).
START_TIMEOUT_S: Final = 60.0
#: How long a child whose pipe closed is given to be seen exited before it is taken to live on
#: without it (a process's pipes close as it exits, a moment before its parent can reap it).
_EXITING_S: Final = 0.5
#: Where the OS has no pidfd: how often a thread waiting on a child checks whether it exited.
_EXIT_POLL_S: Final = 0.1
_READY: Final = b"ready"
_STOP: Final = b""
#: multiprocessing's framing of a message: its size, and past 2 GiB -1 then the size in 8 bytes.
_SIZE: Final = struct.Struct("!i")
_LONG_SIZE: Final = struct.Struct("!Q")


@dataclass(frozen=True, slots=True)
class ProcessContext:
    """What a body in a process is handed beside its input: its run's identity, nothing live.

    No `step`, `signal`, `progress` or client: those talk to the worker's store through its
    event loop, which stays in the worker. A deadline or a cancel kills the process instead.
    """

    job_id: str
    run_id: str
    name: str
    queue: str
    attempt: int
    max_attempts: int
    #: The org this run acts for (from the declaration's `tenant`), or None for `'none'`; the
    #: child's current tenant (`jobs_core.current_tenant`) while the body runs.
    tenant: str | None

    @property
    def final_attempt(self) -> bool:
        return self.attempt >= self.max_attempts


@dataclass(frozen=True, slots=True)
class BodyRef:
    """Where a child imports a body from: `qualname` in `module` (a job handle there stands for
    its body)."""

    module: str
    qualname: str

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> BodyRef:
        return cls(fn.__module__, fn.__qualname__)

    def resolve(self) -> Callable[..., Any]:
        """The body, imported (AttributeError or ImportError when it is not there)."""
        from jobs_core.job import JobHandle

        found: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            found = getattr(found, part)
        if isinstance(found, JobHandle):
            found = found.fn
        if not callable(found):
            raise TypeError(f"{self.module}.{self.qualname} is not callable")
        return found  # type: ignore[no-any-return]


def process_refusal(body: object, *, steps: bool) -> str | None:
    """Why `body` cannot run in a process, or None. `steps`: the declaration set a step option
    (`step_timeout`, `event_poll`), which only `ctx.step` reads."""
    if inspect.iscoroutinefunction(body) or inspect.isasyncgenfunction(body):
        return "an async body runs on the worker's event loop; a process runs a def body"
    if not inspect.isfunction(body):
        return "a body in a process must be a plain function (not a method, partial or object)"
    if "<" in body.__qualname__:
        return (
            f"{body.__qualname__} is a nested function or a lambda: a process imports its body "
            "by module and name, so it must be defined at a module's top level"
        )
    params = list(inspect.signature(body).parameters.values())
    if len(params) >= 2 and _names_job_context(params[1].annotation):
        return (
            "the body declares a JobContext; a body in a process is handed a ProcessContext "
            "(no ctx.step, ctx.signal, ctx.progress)"
        )
    if steps:
        return "step_timeout and event_poll are for ctx.step, which a body in a process lacks"
    return None


def reach_refusal(fn: Callable[..., Any]) -> str | None:
    """Why a process could not import `fn` by its module and name (looked up here), or None."""
    ref = BodyRef.of(fn)
    try:
        found = ref.resolve()
    except Exception as exc:
        return f"{ref.module}.{ref.qualname} cannot be imported ({type(exc).__name__}: {exc})"
    if found is not fn:
        return f"{ref.module}.{ref.qualname} names another object than the body"
    return None


def _names_job_context(annotation: object) -> bool:
    if isinstance(annotation, str):
        return annotation.rsplit(".", 1)[-1].strip() == "JobContext"
    return annotation is JobContext


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a body's process (its `__cause__`)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


class RemoteBodyError(Exception):
    """What a body in a process raised, when the exception itself could not be sent back (it
    cannot be pickled, or it was not an `Exception`: `SystemExit`, `KeyboardInterrupt`)."""


@dataclass(frozen=True, slots=True)
class _Call:
    ref: BodyRef
    input_json: str
    ctx: ProcessContext


# -- the child ---------------------------------------------------------------------------------


def _child_main(conn: Connection, preload: tuple[str, ...], parent: int) -> None:
    """A child's life: import the job modules, say ready, then answer one call at a time until
    the worker says stop or goes away."""
    _die_with(parent)
    # The worker's drain decides when a body stops (a terminal's Ctrl-C reaches the whole group).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    for module in preload:
        # A module that fails here fails again, typed, in the body that needs it.
        with contextlib.suppress(Exception):
            importlib.import_module(module)
    bodies: dict[BodyRef, Callable[..., Any]] = {}
    me = os.getpid()
    try:
        conn.send_bytes(_READY)
        while True:
            data = conn.recv_bytes()
            if data == _STOP:
                return
            conn.send_bytes(_answer(data, bodies, me))
    except (EOFError, OSError):
        return  # the worker is gone


def signal_on_parent_death(sig: signal.Signals) -> None:
    """On Linux, have the kernel send this process `sig` when its parent dies
    (`PR_SET_PDEATHSIG`); elsewhere nothing (the caller polls its parent instead)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, sig, 0, 0, 0)


def _pidfd(pid: int | None) -> int | None:
    """A descriptor readable once process `pid` (a child not yet reaped) exits; None where the
    OS has none (not Linux, a kernel before 5.3)."""
    if pid is None or not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def _die_with(parent: int) -> None:
    """On Linux, be killed when the worker dies, whatever it is doing (a body it can no longer
    settle must not run on beside the run that replaces it)."""
    signal_on_parent_death(signal.SIGKILL)
    if os.getppid() != parent:  # it died before the line above
        os._exit(1)


def _answer(data: bytes, bodies: dict[BodyRef, Callable[..., Any]], me: int) -> bytes:
    try:
        call: _Call = pickle.loads(data)
        fn = bodies.get(call.ref)
        if fn is None:
            fn = bodies[call.ref] = call.ref.resolve()
        with acting_for(call.ctx.tenant):
            value = fn(loads(call.input_json), call.ctx)
    except BaseException as exc:
        _leave_if_forked(me)
        return _raised(exc)
    _leave_if_forked(me)
    try:
        result = None if value is None else dumps(value)
    except Exception as exc:
        why = exc.message if isinstance(exc, JobsError) else f"{type(exc).__name__}: {exc}"
        return pickle.dumps(("unstorable", why))
    return pickle.dumps(("ok", result))


def _leave_if_forked(me: int) -> None:
    """End a process the body forked that returned from it (or raised) here: it holds this
    child's pipe, and its answer would be read as the call's, the child's as the next call's."""
    if os.getpid() != me:
        os._exit(0)


def _raised(exc: BaseException) -> bytes:
    """The answer for an exception: pickled when it makes the round trip, and always its type,
    message and traceback (the exception's own traceback stays in this process)."""
    blob: bytes | None = None
    if isinstance(exc, Exception):
        try:
            blob = _dumps_exception(exc)
            pickle.loads(blob)  # the worker imports what this process does: it loads there too
        except Exception:
            blob = None
    name = type(exc).__qualname__
    # An exception whose own str() raises must still be told, not kill this process.
    try:
        message = str(exc)
    except Exception:
        message = "(its message could not be read)"
    try:
        text = "".join(traceback.format_exception(exc))
    except Exception:
        text = f"{name}: {message} (its traceback could not be formatted)\n"
    return pickle.dumps(("raised", blob, name, message, text))


class _ExceptionPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        # A JobsError's args hold its rendered text, which its __init__ would render again.
        if isinstance(obj, JobsError):
            return _rebuilt, (type(obj), obj.args, dict(obj.__dict__))
        return NotImplemented


def _dumps_exception(exc: Exception) -> bytes:
    import io

    out = io.BytesIO()
    _ExceptionPickler(out, pickle.HIGHEST_PROTOCOL).dump(exc)
    return out.getvalue()


def _rebuilt(cls: type[JobsError], args: tuple[Any, ...], state: dict[str, Any]) -> JobsError:
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc


# -- the worker's side -------------------------------------------------------------------------


class Encoded:
    """A body's result as its child encoded it: JSON text (None for a None result), or why it
    has no JSON form."""

    __slots__ = ("json", "refused")

    def __init__(self, json: str | None, refused: str | None = None) -> None:
        self.json = json
        self.refused = refused

    def text(self) -> str | None:
        """The result's JSON text; `X_JOB_RESULT_INVALID` (the child's reason) when it has none."""
        if self.refused is not None:
            raise ResultInvalidError(self.refused)
        return self.json


def _outcome(reply: bytes) -> Encoded:
    """A child's reply as the body's ending: its result, or what it raised, raised here."""
    kind, *rest = pickle.loads(reply)
    if kind == "ok":
        return Encoded(rest[0])
    if kind == "unstorable":
        return Encoded(None, rest[0])
    blob, type_name, message, text = rest
    exc: BaseException | None = None
    if blob is not None:
        with contextlib.suppress(Exception):
            exc = pickle.loads(blob)
    if isinstance(exc, Exception):
        try:
            str(exc)  # what the worker stores and logs of it: it must be readable here too
        except Exception:
            exc = None
    if not isinstance(exc, Exception):
        exc = RemoteBodyError(f"{type_name}: {message}" if message else type_name)
    exc.__cause__ = RemoteTraceback(f'\n"""\n{text}"""')
    raise exc


class _Child:
    """One spawned process and the worker's end of its pipe."""

    def __init__(self, ctx: Any, preload: tuple[str, ...], name: str) -> None:
        ours, theirs = ctx.Pipe(duplex=True)
        self.conn: Connection = ours
        self.proc: BaseProcess = ctx.Process(
            target=_child_main, args=(theirs, preload, os.getpid()), name=name
        )
        # From the caller's thread: on Linux the child dies with the thread that started it.
        self.proc.start()
        theirs.close()  # so that the child's death reads as the end of the pipe here
        self.pid = self.proc.pid
        #: Readable once the child exited (Linux), None where the OS has no pidfd. Neither the
        #: pipe's end nor multiprocessing's sentinel tells the exit: a process the body forked
        #: inherits both and holds them open for as long as it lives.
        self.exit_fd = _pidfd(self.pid)
        # The same socket as `conn` (a Pipe is a socket pair here), read and written without
        # blocking: a wait for the pipe is a wait for the child's exit too (`_wait`).
        self._sock = socket.socket(fileno=os.dup(self.conn.fileno()))
        self._poller: select.poll | None = None
        self._out_poller: select.poll | None = None
        if self.exit_fd is not None:
            self._poller = select.poll()
            self._poller.register(self.conn.fileno(), select.POLLIN)
            self._poller.register(self.exit_fd, select.POLLIN)
            self._out_poller = select.poll()
            self._out_poller.register(self.conn.fileno(), select.POLLOUT)
            self._out_poller.register(self.exit_fd, select.POLLIN)
        #: It lived on once its pipe had closed: `_reap` killed it.
        self.deaf = False

    def ready(self) -> bool:
        """(A thread of its own.) Wait for the child's imports; False when it died first."""
        try:
            return self._recv() == _READY
        except (EOFError, OSError):
            self._reap()
            return False

    def ask(self, payload: bytes) -> bytes | None:
        """(A thread of its own.) One call's answer; None when the child died (or was killed)
        before it answered."""
        try:
            self._send(payload)
            return self._recv()
        except (EOFError, OSError):
            self._reap()
            return None

    def _send(self, data: bytes) -> None:
        """Write one message as `Connection.send_bytes` frames it; EOFError once the child
        exited before it read it all (a process its body forked may hold the pipe open, and
        never read)."""
        size = len(data)
        head = _SIZE.pack(size) if size <= 0x7FFFFFFF else _SIZE.pack(-1) + _LONG_SIZE.pack(size)
        for part in (head + data,) if size <= 16_384 else (head, data):
            view, sent = memoryview(part), 0
            while sent < len(view):
                try:
                    sent += self._sock.send(view[sent:], socket.MSG_DONTWAIT)
                except BlockingIOError:
                    self._wait(writing=True)

    def _recv(self) -> bytes:
        """The child's next message; EOFError once the child exited without all of one. Told
        by its exit, not by the end of the pipe alone: a process its body forked holds the pipe
        open for as long as it lives, and the worker must not wait for that one, before a
        message or within one (a child killed while it wrote an answer larger than the pipe
        holds left a part of it)."""
        self._wait(writing=False)
        (size,) = _SIZE.unpack(self._read(_SIZE.size))
        if size == -1:
            (size,) = _LONG_SIZE.unpack(self._read(_LONG_SIZE.size))
        return self._read(size)

    def _read(self, n: int) -> bytes:
        # Parts as the socket gives them, up to 1 MiB each, joined once: a buffer made to the
        # message's size first would be zeroed (it cost a 200 KB answer a fifth more CPU).
        parts: list[bytes] = []
        while n:
            try:
                part = self._sock.recv(min(n, 1 << 20), socket.MSG_DONTWAIT)
            except BlockingIOError:
                self._wait(writing=False)
                continue
            if not part:
                raise EOFError  # every process holding the pipe closed it
            parts.append(part)
            n -= len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _wait(self, *, writing: bool) -> None:
        """Until the pipe can be read (written); EOFError once the child exited and it cannot
        (what it wrote before it exited is read first)."""
        ready = self.conn.poll if not writing else self._writable
        if self._poller is not None and self._out_poller is not None:
            # One poller each way for the child's life (a selector made per call costs the
            # round trip a third more CPU); one thread at a time talks to a child.
            fds = {fd for fd, _ in (self._out_poller if writing else self._poller).poll()}
            if self.conn.fileno() not in fds and not ready(0):
                raise EOFError
            return
        while not ready(_EXIT_POLL_S):
            if self.proc.exitcode is not None:
                if not ready(0):
                    raise EOFError
                return

    def _writable(self, timeout: float) -> bool:
        return bool(select.select([], [self._sock], [], timeout)[1])

    def dead(self) -> bool:
        """Whether the child has exited, even when something else in this process reaped it
        (multiprocessing's `is_alive` then still answers True): its pidfd is readable."""
        if self.exit_fd is not None and wait_ready([self.exit_fd], 0):
            return True
        return not self.proc.is_alive()

    def exited(self, timeout: float) -> bool:
        """Wait at most `timeout` seconds for the child to exit; True once it did (reaped)."""
        if self.exit_fd is not None:
            wait_ready([self.exit_fd], timeout)
            return self.proc.exitcode is not None
        give_up = time.monotonic() + timeout
        while self.proc.exitcode is None:
            if time.monotonic() >= give_up:
                return False
            time.sleep(_EXIT_POLL_S)
        return True

    def _reap(self) -> None:
        """(A thread of its own.) After the conversation ended: the child is reaped, killed
        first when it lives on without its pipe (its body closed it), which no one would ever
        end otherwise."""
        if not self.exited(_EXITING_S):  # one that died closed its pipe a moment before
            self.deaf = True
            self.kill()
            self.exited(5.0)
        self.close_fds()

    def close_fds(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(OSError):
            self.conn.close()
        fd, self.exit_fd = self.exit_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()

    def stop(self) -> None:
        """Ask an idle child to exit."""
        with contextlib.suppress(OSError, ValueError):
            self.conn.send_bytes(_STOP)

    def death(self) -> str:
        code = self.proc.exitcode
        if self.deaf:
            return "it closed its pipe to the worker and was killed"
        if code is None:
            return "it stopped answering"
        if code < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-code).name}"
            return f"killed by signal {-code}"
        return f"exit code {code}"


class BodyProcesses:
    """Up to `size` spawned children, one body each at a time, started as bodies need them (a
    body waits for a free one), each importing `preload` (the job modules) before it takes a
    body. Used from one event loop; its pipes are read on threads of its own."""

    def __init__(
        self,
        size: int,
        preload: Iterable[str] = (),
        *,
        name: str = "ujobs-body",
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self.size = size
        self._start_timeout_s = start_timeout_s
        self._preload = tuple(sorted(set(preload)))
        self._name = name
        self._mp = multiprocessing.get_context("spawn")
        self._children: set[_Child] = set()  # started, not yet lost
        self._idle: list[_Child] = []
        self._waiting: deque[asyncio.Future[_Child]] = deque()
        self._io = BodyThreads(keep_idle=size, name_prefix=f"{name}-pipe")
        # What a lost child's thread still does (its reaping); `close` waits for it.
        self._ending: set[Future[Any]] = set()
        self._starts: set[asyncio.Task[None]] = set()
        self._serial = 0
        self._closed = False
        _POOLS.add(self)

    def pids(self) -> list[int]:
        """The children's process ids (started and not lost)."""
        return sorted(c.pid for c in self._children if c.pid is not None)

    async def run(
        self,
        fn: Callable[..., Any],
        input_json: str,
        ctx: ProcessContext,
        started: Callable[[], None],
    ) -> Encoded:
        """Run `fn(loads(input_json), ctx)` in a child; `started()` once a child has it. Raises
        what the body raised, `X_JOB_RESULT_INVALID` for a result with no JSON form,
        `X_JOB_PROCESS_DIED` when the child died first. Cancelled, it kills the child."""
        payload = pickle.dumps(_Call(BodyRef.of(fn), input_json, ctx))
        child = await self._take()
        started()
        answer = self._io.submit(child.ask, payload)
        try:
            reply = await asyncio.shield(asyncio.wrap_future(answer))
        except asyncio.CancelledError:
            # The body runs on for nobody: it ends now, with its process.
            child.kill()
            self._lose(child, answer)
            raise
        if reply is None:
            self._lose(child, answer)
            raise ProcessDiedError(
                f"the body's process (pid {child.pid}) died before it answered: {child.death()}",
                detail=ctx.job_id,
            )
        self._give(child)
        return _outcome(reply)

    async def _take(self) -> _Child:
        if self._closed:
            raise ProcessDiedError("the worker's processes are closed")
        while self._idle:
            child = self._idle.pop()
            if not child.dead():
                return child
            self._lose(child, None)  # died idle: the next body gets a fresh one
        turn: asyncio.Future[_Child] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        self._refill()
        try:
            return await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._give(turn.result())  # handed a child as it was cancelled: the next one's
            raise

    def _refill(self) -> None:
        """Start children for the bodies waiting, up to `size`."""
        waiting = sum(1 for w in self._waiting if not w.done())
        while waiting > len(self._starts) and len(self._children) < self.size and not self._closed:
            self._serial += 1
            child = _Child(self._mp, self._preload, f"{self._name}-{self._serial}")
            self._children.add(child)
            task = asyncio.ensure_future(self._started(child))
            self._starts.add(task)
            task.add_done_callback(self._starts.discard)

    async def _started(self, child: _Child) -> None:
        ready = asyncio.wrap_future(self._io.submit(child.ready))
        late: str | None = None
        try:
            ok = await asyncio.wait_for(asyncio.shield(ready), self._start_timeout_s)
        except TimeoutError:
            child.kill()
            await ready  # answers once the kill has ended the child
            ok, late = False, f"it did not start within {self._start_timeout_s:g} s"
        if ok:
            self._give(child)
            return
        self._children.discard(child)
        why = late if late is not None else child.death()
        for turn in self._waiting:
            if not turn.done():
                # One waiter fails (its attempt, typed) rather than every start failing unseen.
                turn.set_exception(ProcessDiedError(f"a body's process failed to start: {why}"))
                break
        self._refill()

    def _give(self, child: _Child) -> None:
        if self._closed:
            child.stop()
            self._idle.append(child)
            return
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(child)
                return
        self._idle.append(child)

    def _lose(self, child: _Child, reaping: Future[Any] | None) -> None:
        """Forget `child` (dead, or killed); `reaping`: its pipe's thread, which reaps it once
        it ends. With none left running (the child was idle, or had just answered), a thread
        reaps it here: no zombie or descriptor of it is left behind."""
        self._children.discard(child)
        if reaping is None or reaping.done():
            reaping = self._io.submit(child._reap)
        if not reaping.done():
            self._ending.add(reaping)
            reaping.add_done_callback(self._ending.discard)
        self._refill()

    async def close(self) -> None:
        """Stop every child: idle ones exit, any still busy or starting is killed; within about
        `CLOSE_GRACE_S`, no child of this pool is left (each one reaped)."""
        self._closed = True
        for turn in self._waiting:
            if not turn.done():
                turn.set_exception(ProcessDiedError("the worker's processes are closed"))
        self._waiting.clear()
        idle = set(self._idle)
        for child in self._children:
            if child in idle:
                child.stop()
            else:
                child.kill()
        children, self._children, self._idle = list(self._children), set(), []
        await asyncio.to_thread(_reap_all, children, list(self._ending), CLOSE_GRACE_S)
        self._io.shutdown(wait=False)
        _POOLS.discard(self)

    def kill_all(self) -> None:
        """Kill and reap every child now, from any thread (the interpreter's exit)."""
        self._closed = True
        children = list(self._children)
        for child in children:
            child.kill()
        _reap_all(children, [], 1.0)


def _reap_all(children: list[_Child], ending: list[Future[Any]], grace_s: float) -> None:
    """Give `children` `grace_s` in all to exit, kill those left, and reap every one; wait for
    the threads still reaping lost children."""
    for fut in ending:
        with contextlib.suppress(Exception):
            fut.result(timeout=grace_s + 5.0)
    give_up = time.monotonic() + grace_s
    for child in children:
        child.exited(max(0.0, give_up - time.monotonic()))
    for child in children:
        if child.proc.exitcode is None:
            child.kill()
            child.exited(5.0)
        child.close_fds()


_POOLS: weakref.WeakSet[BodyProcesses] = weakref.WeakSet()


@atexit.register
def _kill_left() -> None:
    """A worker that never closed its pool: its children go with it (before multiprocessing's
    own exit hook would wait for them forever)."""
    for pool in list(_POOLS):
        pool.kill_all()
