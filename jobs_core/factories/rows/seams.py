"""Where an import reads and an export writes: a local directory, or any fsspec URL when the
`fsspec` extra is installed; and the rule that keeps a run inside its tenant's place.

A declaration names a ROOT (`root=` for an import, `sink=` for an export): a directory or a URL,
or a function of the run's tenant answering one. A run acting for tenant `acme` under a plain
root uses `<root>/acme` (a cross-tenant run, `tenant="none"`, the root itself); a function
decides the layout itself. Whatever an input names is resolved inside that place — symlinks
followed, `..` collapsed — and refused (`X_IMPORT_SCOPE_INVALID`, `X_EXPORT_SCOPE_INVALID`,
terminal) when it lands outside: one tenant's run never reads or writes another's files.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import uuid
from collections.abc import Callable
from typing import Any, Final, Protocol, TypeAlias

from jobs_core.errors import (
    ExportScopeInvalidError,
    ExportSinkInvalidError,
    ImportScopeInvalidError,
    ImportSourceInvalidError,
    JobsError,
)

#: The extra a URL needs.
FSSPEC_EXTRA: Final = "ultimat3-jobs[fsspec]"
#: The longest name an input may give a source or a prefix, in characters.
MAX_PATH_CHARS: Final = 4_096

Place: TypeAlias = str | os.PathLike[str]
#: A declaration's root: a place, or a function of the run's tenant (None: `tenant="none"`).
RootSpec: TypeAlias = Place | Callable[[str | None], Place]


def is_url(text: str) -> bool:
    """True for a URL (`memory://…`, `s3://…`, `file://…`): fsspec reaches it."""
    return "://" in text


def check_root(root: object, option: str, error: type[JobsError]) -> None:
    """Refuse, at declaration, a root that is neither a place nor a function of the tenant."""
    if callable(root):
        return
    if not isinstance(root, str | os.PathLike) or not os.fspath(root):
        raise error("a directory, a URL, or a function of the tenant answering one", detail=option)
    text = os.fspath(root)
    if not isinstance(text, str) or "\x00" in text:
        raise error("a path or URL as text, without a NUL", detail=option)


def tenant_root(root: RootSpec, tenant: str | None, scope: type[JobsError]) -> str:
    """The place a run acting for `tenant` may use (see the module's docstring)."""
    if callable(root):
        try:
            answer: object = root(tenant)
        except JobsError:
            raise
        except Exception as exc:
            raise scope(f"the root function raised {type(exc).__name__}") from exc
        if not isinstance(answer, str | os.PathLike):
            raise scope("the root function answered no path or URL")
        text = os.fspath(answer)
        if not isinstance(text, str) or not text or "\x00" in text:
            raise scope("the root function answered no path or URL")
        return text
    base = os.fspath(root)
    assert isinstance(base, str)
    if tenant is None:
        return base
    if tenant in (".", "..") or any(c in tenant for c in "/\\\x00"):
        # A tenant that is not one path segment would move the run out of its own directory.
        raise scope("the tenant cannot name a directory of its own under the root", detail="tenant")
    return _join(base, tenant)


def _join(base: str, name: str) -> str:
    if is_url(base):
        return base.rstrip("/") + "/" + name
    return os.path.join(base, name)


def _filesystem(url: str, error: type[JobsError]) -> tuple[Any, str]:
    """The fsspec filesystem and path of `url`; without fsspec, `error` naming the extra."""
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise error(
            f"a URL needs fsspec: pip install '{FSSPEC_EXTRA}'", detail=FSSPEC_EXTRA
        ) from None
    try:
        fs, path = url_to_fs(url)
    except (ImportError, ValueError) as exc:
        raise error(f"no filesystem for this URL ({type(exc).__name__})") from None
    return fs, str(path)


def _local(fs: Any) -> bool:
    """True for fsspec's local filesystem (`file://`): its paths are resolved as a directory's
    are, symlinks followed."""
    protocol = fs.protocol
    return "file" in (protocol if isinstance(protocol, tuple | list) else (protocol,))


def _inside(base: str, path: str) -> bool:
    return path.startswith(base.rstrip("/") + "/")


def _check_name(name: object, what: str, error: type[JobsError]) -> str:
    if not isinstance(name, str) or not name or "\x00" in name or len(name) > MAX_PATH_CHARS:
        raise error(
            f"{what} is a non-empty path or URL without a NUL, at most {MAX_PATH_CHARS} characters",
            detail=what,
        )
    return name


# -- import sources -------------------------------------------------------------------------------


class Source(Protocol):
    """What an import reads: bytes at an offset (blocking; called on a thread)."""

    def read(self, offset: int, length: int) -> bytes:
        """Up to `length` bytes from `offset`; fewer only at the end of the source."""
        ...


class LocalFile:
    """A file on this machine's disk."""

    def __init__(self, path: str, label: str) -> None:
        self.path = path
        self.label = label

    def read(self, offset: int, length: int) -> bytes:
        try:
            with open(self.path, "rb") as f:
                f.seek(offset)
                chunks: list[bytes] = []
                left = length
                while left > 0:
                    chunk = f.read(left)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    left -= len(chunk)
                return b"".join(chunks)
        except OSError as exc:
            raise ImportSourceInvalidError(
                f"{self.label!r} cannot be read: {exc.strerror or type(exc).__name__}",
                detail=self.label,
            ) from None


class FsspecFile:
    """A file behind an fsspec URL."""

    def __init__(self, fs: Any, path: str, label: str) -> None:
        self.fs = fs
        self.path = path
        self.label = label

    def read(self, offset: int, length: int) -> bytes:
        try:
            data = self.fs.cat_file(self.path, start=offset, end=offset + length)
        except (OSError, ValueError) as exc:
            raise ImportSourceInvalidError(
                f"{self.label!r} cannot be read: {type(exc).__name__}", detail=self.label
            ) from None
        return bytes(data)


def open_source(root: str, name: object) -> Source:
    """The source `name` (relative to `root`, or a path or URL inside it) of an import; one
    outside `root` is `X_IMPORT_SCOPE_INVALID`, a URL without fsspec `X_IMPORT_SOURCE_INVALID`."""
    source = _check_name(name, "source", ImportSourceInvalidError)
    if is_url(root):
        fs, base = _filesystem(root, ImportSourceInvalidError)
        if _local(fs) and not is_url(source):
            return open_source(base, source)
        if is_url(source):
            other, path = _filesystem(source, ImportSourceInvalidError)
            if other.protocol != fs.protocol:
                raise ImportScopeInvalidError(
                    "the source is on another filesystem than the root", detail=source
                )
            if _local(fs):
                return open_source(base, path)
        else:
            path = posixpath.join(base, source)
        path = posixpath.normpath(path)
        if not _inside(posixpath.normpath(base), path):
            raise ImportScopeInvalidError("the source is outside the run's root", detail=source)
        return FsspecFile(fs, path, source)
    if is_url(source):
        raise ImportScopeInvalidError("the source is a URL; the root a directory", detail=source)
    real_root = os.path.realpath(root)
    # realpath follows symlinks: one inside the root pointing out of it is outside.
    target = os.path.realpath(os.path.join(real_root, source))
    if not _inside(real_root, target):
        raise ImportScopeInvalidError("the source is outside the run's root", detail=source)
    return LocalFile(target, source)


# -- export sinks ---------------------------------------------------------------------------------


class Sink(Protocol):
    """Where an export writes its objects (blocking; called on a thread)."""

    def put(self, name: str, data: bytes) -> None:
        """Write object `name` whole, replacing any object of that name; a crash never leaves
        a partial object under `name`."""
        ...

    def remove(self, name: str) -> None:
        """Remove object `name`, when there is one."""
        ...

    def where(self, name: str) -> str:
        """Where object `name` lands (a path or URL), for the run's answer."""
        ...


def check_prefix(prefix: object) -> str:
    """An export's prefix: a relative path of plain segments (no `.`, `..`, empty segment,
    backslash or NUL); `X_EXPORT_SCOPE_INVALID` otherwise, so it never leaves the root."""
    text = _check_name(prefix, "prefix", ExportSinkInvalidError)
    segments = text.split("/")
    if text.startswith("/") or any(
        s in ("", ".", "..") or "\\" in s or is_url(s) for s in segments
    ):
        raise ExportScopeInvalidError(
            "the prefix is a relative path of plain segments (no '.', '..', '//', '\\')",
            detail="prefix",
        )
    return text


class LocalDir:
    """A directory on this machine's disk: an object is written to a temporary file beside its
    final name, flushed to disk, then renamed over it (atomic on POSIX)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def _final(self, name: str) -> str:
        final = os.path.join(self.root, *name.split("/"))
        real_root = os.path.realpath(self.root)
        # A directory under the root may be a symlink out of it: resolve before writing.
        if not _inside(real_root, os.path.realpath(final)):
            raise ExportScopeInvalidError("the object would land outside the run's root")
        return final

    def put(self, name: str, data: bytes) -> None:
        final = self._final(name)
        folder, base = os.path.split(final)
        tmp = os.path.join(folder, f".{base}.{uuid.uuid4().hex}.tmp")
        try:
            os.makedirs(folder, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise ExportSinkInvalidError(
                f"{name!r} cannot be written: {exc.strerror or type(exc).__name__}", detail=name
            ) from None

    def remove(self, name: str) -> None:
        final = self._final(name)
        try:
            os.remove(final)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise ExportSinkInvalidError(
                f"{name!r} cannot be removed: {exc.strerror or type(exc).__name__}", detail=name
            ) from None

    def where(self, name: str) -> str:
        return os.path.join(self.root, *name.split("/"))


class FsspecDir:
    """A directory behind an fsspec URL: an object is written under a temporary name, then
    moved over its final one (an object store's single PUT is whole already)."""

    def __init__(self, fs: Any, path: str, url: str) -> None:
        self.fs = fs
        self.path = path.rstrip("/")
        self.url = url.rstrip("/")

    def put(self, name: str, data: bytes) -> None:
        final = f"{self.path}/{name}"
        folder, base = posixpath.split(final)
        tmp = f"{folder}/.{base}.{uuid.uuid4().hex}.tmp"
        try:
            self.fs.makedirs(folder, exist_ok=True)
            self.fs.pipe_file(tmp, data)
            self.fs.mv(tmp, final)
        except (OSError, ValueError) as exc:
            with contextlib.suppress(OSError, ValueError):
                self.fs.rm_file(tmp)
            raise ExportSinkInvalidError(
                f"{name!r} cannot be written: {type(exc).__name__}", detail=name
            ) from None

    def remove(self, name: str) -> None:
        final = f"{self.path}/{name}"
        try:
            if self.fs.exists(final):
                self.fs.rm_file(final)
        except (OSError, ValueError) as exc:
            raise ExportSinkInvalidError(
                f"{name!r} cannot be removed: {type(exc).__name__}", detail=name
            ) from None

    def where(self, name: str) -> str:
        return f"{self.url}/{name}"


def open_sink(root: str) -> Sink:
    """The sink at `root`: a local directory, or an fsspec URL (`X_EXPORT_SINK_INVALID` naming
    the extra without fsspec)."""
    if is_url(root):
        fs, path = _filesystem(root, ExportSinkInvalidError)
        return LocalDir(path) if _local(fs) else FsspecDir(fs, path, root)
    return LocalDir(root)
