"""What a `ujobs` start imports: a command loads its own module, not every command's; the
package `jobs_core` loads its names on first use; the entry points are read once a process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from jobs_core import urls
from jobs_core.cli.base import COMMAND_MODULES

ROOT = Path(__file__).resolve().parent.parent


def _loaded_after(code: str) -> set[str]:
    """The `jobs_core` modules a fresh interpreter holds after running `code`."""
    probe = (
        f"import sys\n{code}\n"
        "import json\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('jobs_core'))))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(json.loads(out.stdout.splitlines()[-1]))


def _help(*words: str) -> str:
    return (
        "from jobs_core.cli import main\n"
        "try:\n"
        f"    main({list(words)!r})\n"
        "except SystemExit:\n"
        "    pass\n"
    )


def test_every_command_is_declared_by_the_module_the_table_names() -> None:
    from jobs_core.cli import main

    found = {name: cmd.callback.__module__ for name, cmd in main.commands.items() if cmd.callback}
    assert found == COMMAND_MODULES


def test_a_command_loads_its_own_module_and_not_the_others() -> None:
    bare = _loaded_after("import jobs_core.cli")
    assert not bare & {"jobs_core.worker", "jobs_core.records", "jobs_core.facade"}, bare
    worker = _loaded_after(_help("worker", "--help"))
    assert "jobs_core.cli.run" in worker
    assert not worker & {
        "jobs_core.cli.backfills",
        "jobs_core.cli.consumers",
        "jobs_core.cli.dashboard",
        "jobs_core.cli.operate",
        "jobs_core.cli.webhooks",
        "jobs_core.factories",
    }, worker
    listing = _loaded_after(_help("--help"))
    assert {m for m in COMMAND_MODULES.values()} <= listing


def test_the_package_names_load_on_first_use_and_job_stays_the_decorator() -> None:
    import jobs_core.job  # the submodule, imported: `jobs_core.job` is still the decorator
    from jobs_core import job

    assert callable(job) and job is jobs_core.job and not isinstance(job, type(jobs_core))
    for name in jobs_core.__all__:
        assert getattr(jobs_core, name) is not None, name
    assert set(jobs_core.__all__) <= set(dir(jobs_core))
    with pytest.raises(AttributeError):
        jobs_core.no_such_name  # noqa: B018


@pytest.mark.parametrize("package", ["jobs_core", "jobs_core.cli"])
@pytest.mark.parametrize("name", ["a.b", "worker.core", ".."])
def test_a_name_that_is_no_identifier_is_no_attribute(package: str, name: str) -> None:
    """`getattr` with a dotted or empty name is an AttributeError (so `hasattr` says False),
    never a ModuleNotFoundError from importing its parent, nor a grandchild module."""
    import importlib

    module = importlib.import_module(package)
    assert not hasattr(module, name)


def test_a_user_file_importing_a_name_the_package_lacks_fails_mypy(tmp_path: Path) -> None:
    """The lazy names stay typed for a user's checker: a typo in `from jobs_core import ...` is
    an error (a module `__getattr__` seen by mypy would make it Any), the real names keep their
    types."""
    user = tmp_path / "user.py"
    user.write_text(
        "from jobs_core import Jobs, Jobz, job\n"
        "from jobs_core.cli import main, nothing_here\n"
        "reveal_type(Jobs)\n"
        "reveal_type(job)\n",
        encoding="utf-8",
    )
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    # Followed silently, as mypy follows an installed package: what it says of our own modules
    # (an optional extra's missing stubs, say) is our checker's business, not this user's.
    cmd = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent"]
    cmd += ["--cache-dir", str(tmp_path / "c"), "user.py"]
    out = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True).stdout
    assert 'Module "jobs_core" has no attribute "Jobz"' in out, out
    assert 'Module "jobs_core.cli" has no attribute "nothing_here"' in out, out
    assert 'Revealed type is "def (driver: jobs_core.driver.JobDriver' in out, out
    assert "-> jobs_core.job.JobHandle" in out, out
    assert [line.split(":")[0] for line in out.splitlines() if " error: " in line] == [
        "user.py",
        "user.py",
    ], out


def test_the_entry_points_are_read_once_and_again_for_a_scheme_not_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[str] = []
    first = EntryPoint("one", "jobs_memory:driver_from_url", "ujobs.test")
    later = EntryPoint("two", "jobs_memory:driver_from_url", "ujobs.test")
    installed = [first]

    def entry_points(group: str) -> list[EntryPoint]:
        reads.append(group)
        return list(installed)

    monkeypatch.setattr(urls, "entry_points", entry_points)
    monkeypatch.setattr(urls, "_FOUND", {})
    assert urls.entry_point_for("ujobs.test", "driver", "one://x") == first
    assert urls.entry_point_for("ujobs.test", "driver", "one://y") == first
    assert reads == ["ujobs.test"]
    installed.append(later)  # a plugin put on the path since
    assert urls.entry_point_for("ujobs.test", "driver", "two://x") == later
    assert reads == ["ujobs.test"] * 2


def test_version_is_read_when_asked() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-m", "jobs_core.cli", "--version"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.startswith("ujobs ")
