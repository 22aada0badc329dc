"""Mutation sampler for the real stores: which single-bug copies of the Postgres SQL and the
Redis Lua does the parity suite miss?

scripts/mutate_memory.py asks it of the memory driver; a third party's broken driver is more
likely a broken statement or script, so this one mutates those, as text:

- Postgres (`--store pg`): each statement `jobs_pg.driver.STATEMENTS` compiles (the SQL the
  driver really sends, built by `jobs_pg/statements/*.py`):
  `cmp` a comparison flipped (`<`/`<=`, `>`/`>=`, `=`/`!=`, `IS NULL`/`IS NOT NULL`);
  `filter` one condition of a WHERE / ON / WHEN / AND chain made `true`;
  `set` one column of an UPDATE's (or an upsert's) SET list dropped;
  `limit` a LIMIT one off (up and down);
  `state` one state literal (`'ready'`...) replaced by another;
  `skip_locked` a `SKIP LOCKED` dropped.
- Redis (`--store redis`): each script of `jobs_redis/lua/` and each include (`includes/`,
  which every script that includes it then carries): `cmp` (`<`/`<=`, `>`/`>=`, `==`/`~=`);
  `drop_write` a `redis.call` statement of a write command dropped; `limit` a ZRANGE `LIMIT`
  count or a `local limit|scan|left|want = ...` one off; `state` a state word in a string
  (a row's packed state, a match pattern) replaced by another.

The sample is spread over the kinds first, then over the statements (scripts) of each kind.
Each mutant runs in a child process of its own (one at a time): the Postgres child compiles
the one statement mutated (`jobs_pg.sqltext.compile_sql` wrapped) and runs on a newly migrated
schema of its own, each statement bounded by `STATEMENT_TIMEOUT_MS` (a mutated recursive CTE
may never end); the Redis child loads the scripts from a copy of `lua/` holding the one mutated
file and runs on a throwaway redis-server of its own (a mutated script that never ends holds
its whole server, and the shared one serves everyone's tests). Both run the suite as
`mutate_memory.run_suite` does (every scenario, the mutated statement's family's first, then
every family's `ci` walk, stopping at the first failure); the schema (its statements still
running too) or the server goes after the child, whatever it did. A mutant that outruns
`--timeout` counts as killed but is reported apart. A Postgres sample is drawn from the
statements the unmutated run compiled: the suite cannot judge one it never runs (a lost
claim's look-ups).

Run it from the repository root with the test Postgres up (`JOBS_TEST_PG_URL`, as the tests)
and `redis-server` on the PATH; a survivor costs the whole suite on its store (minutes), most
kills seconds::

    nice -n 10 .venv/bin/python scripts/mutate_stores.py --store pg --sample 30 \\
        --out pg-mutants.jsonl
    .venv/bin/python scripts/mutate_stores.py --report pg-mutants.jsonl
    .venv/bin/python scripts/mutate_stores.py --store redis --show 'job_claim:cmp:3:0'
    .venv/bin/python scripts/mutate_stores.py --store pg --list

The options are mutate_memory.py's (`--seed`, `--seeds`, `--timeout`, `--rerun`, `--keys`,
`--without-holes`); a key is `<statement or script>:<kind>:<site>:<variant>`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import os
import re
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mutate_memory import (
    ROOT,
    Mutant,
    add_run_args,
    family_of,
    run_main,
    run_suite,
    sample,
)

LUA = ROOT / "jobs_redis" / "lua"
_STATES = ("ready", "running", "parked", "completed", "failed", "dead", "cancelled")
#: Scripts the parity suite never runs (`ujobs db upgrade`'s).
_LUA_SKIP = frozenset({"migrate", "migrate_leases", "migrate_webhooks"})
#: The family of an include whose name is no driver method's.
_INCLUDE_FAMILY = {
    "account": "counters",
    "flows": "flows",
    "durable": "durable",
    "match": "durable",
    "decimal": "postings",
}


def store_family(func: str) -> str:
    """The family whose walk a mutant of statement (or script) `func` runs first."""
    name = func.removeprefix("includes/").lower()
    return _INCLUDE_FAMILY.get(name) or family_of("_" + name)


@dataclass(frozen=True)
class StoreMutant(Mutant):
    """One edit of statement (script) `func`'s text: its `ordinal`-th site of `kind`."""

    @property
    def key(self) -> str:
        return f"{self.func}:{self.kind}:{self.ordinal}:{self.variant}"

    @property
    def family(self) -> str:
        return store_family(self.func)


@dataclass(frozen=True)
class Site:
    """One place a mutation fits: `text[start:end]` becomes each of `variants` in turn."""

    kind: str
    start: int
    end: int
    variants: tuple[str, ...]
    what: str


# -- reading the text: what is code, and how deep in parentheses ------------------------------


def _sql_code(text: str) -> tuple[list[bool], list[int]]:
    """Per character: is it code (not inside a quoted literal or identifier), and how many
    parentheses are open before it."""
    code, depth = [True] * len(text), [0] * len(text)
    quote, d = "", 0
    for i, ch in enumerate(text):
        depth[i] = d
        if quote:
            code[i] = False
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote, code[i] = ch, False
        elif ch == "(":
            d += 1
        elif ch == ")":
            d -= 1
    return code, depth


_LUA_LONG = re.compile(r"\[(=*)\[")


def _lua_regions(text: str) -> str:
    """Per character: `c` code, `s` inside a string literal, `-` a comment."""
    out = ["c"] * len(text)
    i = 0
    while i < len(text):
        if text.startswith("--", i):
            long = _LUA_LONG.match(text, i + 2)
            end = (
                text.find(f"]{long.group(1)}]", long.end()) + len(long.group(0))
                if long
                else text.find("\n", i)
            )
            end = len(text) if end < i else end
            out[i:end] = "-" * (end - i)
            i = end
        elif text[i] in "'\"":
            j = i + 1
            while j < len(text) and text[j] != text[i]:
                j += 2 if text[j] == "\\" else 1
            out[i : j + 1] = "s" * (j + 1 - i)
            i = j + 1
        elif long := _LUA_LONG.match(text, i):
            end = text.find(f"]{long.group(1)}]", long.end()) + len(long.group(0))
            out[i:end] = "s" * (end - i)
            i = end
        else:
            i += 1
    return "".join(out)


def _span(text: str, start: int, code: list[bool], depth: list[int], ends: tuple[str, ...]) -> int:
    """Where the expression starting at `start` ends: a closing parenthesis of its own depth,
    or one of `ends` at its depth outside quotes, or the text's end."""
    d = depth[start]
    for j in range(start, len(text)):
        if code[j] and depth[j] == d and (text[j] == ")" or text.startswith(ends, j)):
            return j
    return len(text)


def _others(word: str) -> tuple[str, ...]:
    return tuple(s for s in _STATES if s != word)


# -- Postgres -------------------------------------------------------------------------------------

_SQL_CMP = re.compile(r" (<=|>=|!=|<>|<|>|=) ")
_SQL_FLIP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "=": "!=", "!=": "=", "<>": "="}
_SQL_NULL = re.compile(r" IS (NOT )?NULL\b")
_SQL_STATE = re.compile("'(" + "|".join(_STATES) + ")'")
_SQL_LIMIT = re.compile(r"\bLIMIT ")
_SQL_FILTER = re.compile(r"\b(?:WHERE|AND|ON|WHEN|HAVING) ")
_SQL_SET = re.compile(r"(?<=\s)SET ")
_FILTER_ENDS = (
    " AND ",
    " OR ",
    "\n",
    " ORDER BY",
    " GROUP BY",
    " LIMIT ",
    " RETURNING ",
    " FOR ",
    " THEN ",
    " ON CONFLICT",
    " UNION",
    " OFFSET ",
    ", ",
    " ELSE ",
    " END",
    " DO ",
    " FILTER ",
)
_SET_ENDS = (" FROM ", " WHERE ", "\n", " RETURNING ")


def sql_sites(text: str) -> list[Site]:
    """Every mutation the SQL `text` admits, in order of kind then place."""
    code, depth = _sql_code(text)
    sites: list[Site] = []
    assignments = set()
    for m in _SQL_SET.finditer(text):
        if not code[m.start()]:
            continue
        items, at = [], m.end()
        while True:
            end = _span(text, at, code, depth, (", ", *_SET_ENDS))
            items.append((at, end))
            if not text.startswith(", ", end) or depth[end] != depth[at]:
                break
            at = end + 2
        for at, end in items:
            eq = text.find(" = ", at, end)
            assignments.add(eq)
        if len(items) < 2:
            continue  # a SET of one column dropped is no statement
        for k, (at, end) in enumerate(items):
            cut = (at, items[k + 1][0]) if k + 1 < len(items) else (items[k - 1][1], end)
            column = text[at:end].split("=")[0].strip()
            sites.append(Site("set", *cut, ("",), f"drop SET {column}"))
    for m in _SQL_CMP.finditer(text):
        op = m.group(1)
        if code[m.start(1)] and m.start() not in assignments:
            new = _SQL_FLIP[op]
            around = text[max(0, m.start() - 30) : m.end() + 20].replace("\n", " ")
            sites.append(Site("cmp", *m.span(1), (new,), f"{op} -> {new} in `{around}`"))
    for m in _SQL_NULL.finditer(text):
        if code[m.start()]:
            new = " IS NULL" if m.group(1) else " IS NOT NULL"
            around = text[max(0, m.start() - 30) : m.start()].replace("\n", " ")
            sites.append(Site("cmp", *m.span(), (new,), f"`{around}{m.group(0)}` ->{new}"))
    for m in _SQL_FILTER.finditer(text):
        if not code[m.start()] or text.startswith("CONFLICT", m.end()):
            continue
        if m.group(0) == "ON " and text[: m.start()].endswith("DISTINCT "):
            continue  # `DISTINCT ON (...)` names columns, not a condition
        head = text[: m.start()].rpartition("\n")[2]
        if "ON CONFLICT" in head and " DO " not in head.partition("ON CONFLICT")[2]:
            continue  # the conflict target's index predicate: cut, no index matches it
        end = _span(text, m.end(), code, depth, _FILTER_ENDS)
        cond = text[m.end() : end]
        if cond and cond != "true":
            short = cond if len(cond) < 90 else cond[:87] + "..."
            sites.append(Site("filter", m.end(), end, ("true",), f"drop `{short}`"))
    for m in _SQL_LIMIT.finditer(text):
        if not code[m.start()]:
            continue
        at = m.end()
        end = (
            _span(text, at + 1, code, depth, ()) + 1
            if text[at] == "("
            else re.compile(r"[\s)]|$").search(text, at).start()  # type: ignore[union-attr]
        )
        token = text[at:end]
        bumped = (f"({token} + 1)", f"({token} - 1)")
        sites.append(Site("limit", at, end, bumped, f"LIMIT {token} +1 / -1"))
    for m in _SQL_STATE.finditer(text):
        word = m.group(1)
        swaps = tuple(f"'{s}'" for s in _others(word))
        around = text[max(0, m.start() - 30) : m.start()].replace("\n", " ")
        sites.append(Site("state", *m.span(), swaps, f"`{around}'{word}'` swapped"))
    for m in re.finditer(r" SKIP LOCKED", text):
        sites.append(Site("skip_locked", *m.span(), ("",), "drop SKIP LOCKED"))
    return sites


# -- Redis ----------------------------------------------------------------------------------------

_LUA_CMP = re.compile(r"<=|>=|==|~=|<|>")
_LUA_FLIP = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "~=", "~=": "=="}
_LUA_CALL = re.compile(r"redis\.p?call\(\s*\"([A-Za-z]+)\"")
_LUA_STATEMENT_START = re.compile(r"(?:^|\bthen|\bdo|\belse|;)[ \t]*$")
_LUA_WRITES = frozenset(
    {
        "HSET",
        "HSETNX",
        "HMSET",
        "HDEL",
        "HINCRBY",
        "HINCRBYFLOAT",
        "SET",
        "SETNX",
        "SETEX",
        "PSETEX",
        "DEL",
        "UNLINK",
        "INCR",
        "INCRBY",
        "DECR",
        "DECRBY",
        "ZADD",
        "ZREM",
        "ZINCRBY",
        "ZREMRANGEBYSCORE",
        "ZREMRANGEBYLEX",
        "ZREMRANGEBYRANK",
        "SADD",
        "SREM",
        "SMOVE",
        "LPUSH",
        "RPUSH",
        "LPOP",
        "RPOP",
        "LREM",
        "LTRIM",
        "LSET",
        "EXPIRE",
        "PEXPIRE",
        "EXPIREAT",
        "PEXPIREAT",
        "PERSIST",
        "XADD",
        "XDEL",
        "XTRIM",
        "PUBLISH",
        "SPUBLISH",
        "RENAME",
        "APPEND",
        "GETDEL",
    }
)
_LUA_LIMIT_ARG = re.compile(r"\"LIMIT\",\s*[^,()]+,\s*")
_LUA_LIMIT_LOCAL = re.compile(r"(?m)^[ \t]*local (?:limit|scan|left|want) = ([^\n]+?)[ \t]*$")
_LUA_STATE = re.compile(r"(?:(?<=%z)|(?<![A-Za-z_]))(" + "|".join(_STATES) + r")(?![A-Za-z_])")


def lua_sites(text: str) -> list[Site]:
    """Every mutation the Lua `text` admits, in order of kind then place."""
    regions = _lua_regions(text)
    code = [r == "c" for r in regions]
    bare = "".join(ch if r == "c" else " " for ch, r in zip(text, regions, strict=True))
    depth = _sql_code(bare)[1]
    sites: list[Site] = []

    def line_of(at: int) -> str:
        return text[text.rfind("\n", 0, at) + 1 : text.find("\n", at)].strip()

    for m in _LUA_CMP.finditer(text):
        if code[m.start()] and code[m.end() - 1]:
            new = _LUA_FLIP[m.group(0)]
            sites.append(
                Site("cmp", *m.span(), (new,), f"{m.group(0)} -> {new} in `{line_of(m.start())}`")
            )
    for m in _LUA_CALL.finditer(text):
        before = text[text.rfind("\n", 0, m.start()) + 1 : m.start()]
        if not code[m.start()] or m.group(1).upper() not in _LUA_WRITES:
            continue
        if not _LUA_STATEMENT_START.search(before):
            continue  # its answer is used: not a statement of its own
        end = _span(text, text.index("(", m.start()) + 1, code, depth, ()) + 1
        keep = "\n" * text.count("\n", m.start(), end)
        sites.append(Site("drop_write", m.start(), end, (keep,), f"drop `{line_of(m.start())}`"))
    for m in _LUA_LIMIT_ARG.finditer(text):
        if not code[m.start()] and code[m.end()]:
            at = m.end()
            end = _span(text, at, code, depth, (",",))
            token = text[at:end].strip()
            bumped = (f"({token}) + 1", f"({token}) - 1")
            sites.append(Site("limit", at, at + len(token), bumped, f"LIMIT count {token} +1 / -1"))
    for m in _LUA_LIMIT_LOCAL.finditer(text):
        if code[m.start(1)]:
            expr = m.group(1).split(" --")[0].rstrip()
            at = m.start(1)
            bumped = (f"({expr}) + 1", f"({expr}) - 1")
            sites.append(Site("limit", at, at + len(expr), bumped, f"`{line_of(at)}` +1 / -1"))
    for m in _LUA_STATE.finditer(text):
        if regions[m.start()] == "s":
            word = m.group(1)
            sites.append(
                Site("state", *m.span(), _others(word), f"{word} swapped in `{line_of(m.start())}`")
            )
    return sites


def _sites(store: str, text: str) -> list[Site]:
    return sql_sites(text) if store == "pg" else lua_sites(text)


def texts(store: str) -> dict[str, str]:
    """Each statement's (script file's) text, by the name a mutant gives it."""
    if store == "pg":
        from jobs_pg.driver import STATEMENTS

        return {name: STATEMENTS[name].text for name in sorted(STATEMENTS)}
    out = {}
    for path in sorted(LUA.glob("*.lua")) + sorted((LUA / "includes").glob("*.lua")):
        name = path.relative_to(LUA).as_posix().removesuffix(".lua")
        if name not in _LUA_SKIP:
            out[name] = path.read_text()
    return out


def _numbered(sites: list[Site]) -> Iterator[tuple[int, Site]]:
    seen: Counter[str] = Counter()
    for site in sites:
        yield seen[site.kind], site
        seen[site.kind] += 1


def enumerate_mutants(store: str) -> list[Mutant]:
    """Every mutant of every statement (script) of `store`."""
    out: list[Mutant] = []
    for name, text in texts(store).items():
        for ordinal, site in _numbered(_sites(store, text)):
            line = text.count("\n", 0, site.start) + 1
            for variant, new in enumerate(site.variants):
                what = site.what if len(site.variants) < 3 else f"{site.what} -> {new}"
                out.append(StoreMutant(site.kind, ordinal, variant, name, line, what, store))
    return out


def apply(store: str, text: str, kind: str, ordinal: int, variant: int) -> str:
    """`text` with its `ordinal`-th site of `kind` made its `variant`."""
    for n, site in _numbered(_sites(store, text)):
        if site.kind == kind and n == ordinal:
            return text[: site.start] + site.variants[variant] + text[site.end :]
    raise ValueError(f"no {kind} site {ordinal}")


def pick(every: list[Mutant], n: int, seed: int) -> list[Mutant]:
    """Spread over the kinds first, then over the statements (scripts) of each kind."""
    return sample(every, n, seed, by=lambda m: m.kind, then=lambda m: m.func)


def show(store: str, key: str) -> str:
    """The unified diff of mutant `key` against its statement (script)."""
    func, kind, ordinal, variant = key.rsplit(":", 3)
    text = texts(store)[func]
    after = apply(store, text, kind, int(ordinal), int(variant))
    lines = difflib.unified_diff(text.splitlines(True), after.splitlines(True), func, key, n=2)
    return "".join(lines)


# -- one mutant, in a child of its own --------------------------------------------------------


def _mutated_pg(spec: dict[str, Any]) -> None:
    """Make `jobs_pg` compile statement `spec["func"]` mutated (before anything compiled it)."""
    from jobs_pg import sqltext

    compile_sql = sqltext.compile_sql

    def mutated(name: str, stmt: Any, **kw: Any) -> Any:
        sql = compile_sql(name, stmt, **kw)
        if name != spec["func"]:
            return sql
        text = apply("pg", sql.text, spec["kind"], spec["ordinal"], spec["variant"])
        return dataclasses.replace(sql, text=text)

    sqltext.compile_sql = mutated  # type: ignore[assignment]
    from jobs_pg.driver import STATEMENTS

    # Compiled before the patch (at an import), it would be the unmutated text.
    STATEMENTS._compiled.pop(spec["func"], None)


@contextlib.contextmanager
def _mutated_lua(spec: dict[str, Any]) -> Iterator[None]:
    """Make `jobs_redis` load its scripts from a copy of `lua/` holding the mutated file."""
    from jobs_redis import scripts

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(LUA, root / "lua")
        path = root / "lua" / f"{spec['func']}.lua"
        path.write_text(apply("redis", path.read_text(), *_edit(spec)))
        real = scripts.files
        scripts.files = lambda package: root  # type: ignore[assignment,misc]
        try:
            yield
        finally:
            scripts.files = real


def _edit(spec: dict[str, Any]) -> tuple[str, int, int]:
    return spec["kind"], spec["ordinal"], spec["variant"]


def run_one(spec: dict[str, Any]) -> dict[str, object]:
    """Run the suite on the store's driver with the mutant of `spec` in, on `spec["space"]`."""

    def suite(factory: Any) -> dict[str, object]:
        seeds, without_holes = int(spec.get("seeds", 1)), bool(spec.get("without_holes"))
        return run_suite(factory, spec["family"], seeds, without_holes)

    mutant = spec["kind"] != "none"
    if spec["module"] == "pg":
        if mutant:
            _mutated_pg(spec)
        # libpq reads it at every connect: the child's connections only.
        os.environ["PGOPTIONS"] = f"-c statement_timeout={STATEMENT_TIMEOUT_MS}"
        from jobs_pg.driver import STATEMENTS
        from tests.pg.conftest import drop_schema, migrate, parity_factory

        migrate(spec["space"])
        try:
            with parity_factory(spec["space"]) as factory:
                answer = suite(factory)
        finally:
            drop_schema(spec["space"])
        # What the suite ran (compiled on first use): a mutant of any other statement is
        # beyond its reach (a lost claim's look-ups, say), and left out of the sample.
        return {**answer, "used": sorted(STATEMENTS._compiled)} if not mutant else answer
    from tests.redis.conftest import _real

    with _mutated_lua(spec) if mutant else contextlib.nullcontext():
        return suite(lambda: _real(spec["url"], prefix=spec["space"]))


def _reached(every: list[Mutant], base: dict[str, object]) -> list[Mutant]:
    """The mutants of statements the unmutated run used (every script, on Redis)."""
    used = base.get("used")
    if not isinstance(used, list):
        return every
    left = sorted({m.func for m in every} - set(used))
    print(f"statements the suite never ran, left out: {', '.join(left) or 'none'}")
    return [m for m in every if m.func in used]


#: The throwaway Redis servers of the mutants running, by URL (see `_own_space`).
_SERVERS: dict[str, Any] = {}
#: How long one statement of a mutant may run: a mutated recursive CTE (the queue skip-scan of
#: `QUEUE_DEMAND`) may never end, and would go on burning the shared server's CPU.
STATEMENT_TIMEOUT_MS = 20_000


def _own_space(spec: dict[str, object]) -> dict[str, object]:
    """`spec` with a store of its own: a schema on the test server (Postgres), or a throwaway
    redis-server (a mutated script that never ends holds the whole server, and the shared one
    serves everyone's tests)."""
    space = f"mut_{uuid.uuid4().hex[:12]}"
    if spec["module"] == "pg":
        return {**spec, "space": space}
    from tests.redis.conftest import RedisServer

    server = RedisServer(Path(tempfile.mkdtemp(prefix="ujobs-mutant-")))
    server.start()
    _SERVERS[server.url] = server
    return {**spec, "space": space, "url": server.url}


def _drop_space(spec: dict[str, object]) -> None:
    """Drop what a child may have left (killed at its timeout, it cleaned up nothing)."""
    space = str(spec["space"])
    if spec["module"] == "redis":
        server = _SERVERS.pop(str(spec["url"]))
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)
        return
    from tests.pg.conftest import admin, drop_schema

    with admin() as conn:
        # A statement of a killed child may still run on the server (until it writes to the
        # socket): end it, or the drop waits for its locks.
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE pid <> pg_backend_pid() AND strpos(query, %s) > 0",
            (space,),
        )
    drop_schema(space)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_run_args(parser)
    parser.add_argument("--store", choices=("pg", "redis"), default="pg")
    args = parser.parse_args()
    run_main(
        args,
        run_one,
        lambda key: show(args.store, key),
        lambda: enumerate_mutants(args.store),
        {"kind": "none", "family": "jobs", "module": args.store},
        script=Path(__file__),
        pick=pick,
        before=_own_space,
        after=_drop_space,
        narrow=_reached,
    )


if __name__ == "__main__":
    main()
