"""The import rules of SPEC §2: jobs_core names no backend; backends never import each other."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BACKEND_LIBS = {"sqlalchemy", "psycopg", "psycopg_pool", "redis", "alembic", "lupa", "fakeredis"}
PACKAGES = {"jobs_core", "jobs_memory", "jobs_pg", "jobs_redis"}
FORBIDDEN: dict[str, set[str]] = {
    "jobs_core": (PACKAGES - {"jobs_core"}) | BACKEND_LIBS,
    "jobs_memory": {"jobs_pg", "jobs_redis"} | BACKEND_LIBS,
    "jobs_pg": {"jobs_memory", "jobs_redis", "redis", "lupa", "fakeredis"},
    "jobs_redis": {"jobs_memory", "jobs_pg", "sqlalchemy", "psycopg", "psycopg_pool", "alembic"},
}


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_forbidden_imports(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package} has no modules"
    offenders = {
        str(f.relative_to(ROOT)): sorted(imported_roots(f) & FORBIDDEN[package]) for f in files
    }
    assert {f: bad for f, bad in offenders.items() if bad} == {}


def test_jobs_core_imports_without_any_backend_library() -> None:
    code = (
        "import sys, jobs_core.worker, jobs_core.cli, jobs_core.facade, jobs_core.testing\n"
        f"loaded = sorted(m for m in {sorted(BACKEND_LIBS | PACKAGES - {'jobs_core'})!r}"
        " if m in sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_only_the_dashboard_needs_its_extra() -> None:
    """`ujobs` and the library load without Starlette, Jinja2 or uvicorn: only the dashboard
    (and `ujobs dashboard`, when run) and the webhook receiver's Starlette adapter (which an app
    imports to mount the route) import them."""
    web = {"starlette", "jinja2", "uvicorn", "multipart", "python_multipart"}
    adapters = {Path("jobs_core/factories/webhooks/receiver_starlette.py")}
    offenders = {
        str(f.relative_to(ROOT)): sorted(imported_roots(f) & web)
        for f in sorted((ROOT / "jobs_core").rglob("*.py"))
        if "dashboard" not in f.relative_to(ROOT).parts
        and f.name != "dashboard.py"
        and f.relative_to(ROOT) not in adapters
    }
    assert {f: bad for f, bad in offenders.items() if bad} == {}
    code = (
        "import sys, jobs_core.worker, jobs_core.cli, jobs_core.operator\n"
        "import jobs_core.factories.webhooks\n"
        f"loaded = sorted(m for m in {sorted(web)!r} if m in sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
