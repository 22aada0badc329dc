"""Driver URLs: the schemes we accept, the libpq form psycopg wants, the masked form, and
`from_url` (behind the `ujobs.drivers` entry points `postgresql+psycopg`, `postgresql`,
`postgres`, via `jobs_pg.plugin`).

Driver options may ride the URL's query and are removed before libpq sees it (libpq refuses
parameters it does not know): `schema` (else env `JOBS_PG_SCHEMA`, else `ujobs`), `pool_size`,
`wake` (`0`/`1`), `prepare` (`0`/`1`), `lazy_claim` (`0`/`1`), `listen_url`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

from jobs_core.errors import DriverUrlInvalidError
from jobs_core.urlparams import split_params
from jobs_core.urls import encode_userinfo, mask_text, mask_url

if TYPE_CHECKING:
    from jobs_pg.driver import PgDriver

SCHEMES: Final = ("postgresql+psycopg", "postgresql", "postgres")
#: Query parameters that are ours, not libpq's.
DRIVER_OPTIONS: Final = ("schema", "pool_size", "wake", "prepare", "lazy_claim", "listen_url")


def _split(url: str) -> tuple[str, str]:
    scheme, sep, rest = encode_userinfo(url).partition("://")
    if not sep or scheme not in SCHEMES:
        raise DriverUrlInvalidError(
            "expected postgresql+psycopg://… or postgresql://…", detail=mask(url)
        )
    return scheme, rest


def libpq_url(url: str) -> str:
    """`url` as libpq reads it (`postgresql://…`), refusing any other scheme."""
    _, rest = _split(url)
    return "postgresql://" + rest


def sqlalchemy_url(url: str) -> str:
    """`url` for a SQLAlchemy engine on psycopg 3 (`postgresql+psycopg://…`)."""
    _, rest = _split(url)
    return "postgresql+psycopg://" + rest


def mask(url: str) -> str:
    """`url` with every password masked: `jobs_core.urls.mask_url`, the one masking function."""
    return mask_url(url)


def split_options(url: str) -> tuple[str, dict[str, str]]:
    """`url` without our driver options (the rest kept as written, so libpq reads it as given),
    and those options; a parameter libpq would refuse is refused here, typed."""
    _split(url)
    base, opts = split_params(url, DRIVER_OPTIONS)
    _check_libpq_params(base, url)
    return base, opts


def flag(value: str, what: str, url: str) -> bool:
    """A `0`/`1` URL option (also true/false, yes/no, on/off); anything else is refused."""
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise DriverUrlInvalidError(f"{what} must be 0 or 1", detail=mask(url))


def from_url(url: str) -> PgDriver:
    """A new, unopened `PgDriver` for `url` (the `ujobs --driver postgresql+psycopg://…` path)."""
    from jobs_pg.driver import PgDriver

    base, opts = split_options(url)
    try:
        pool_size = int(opts.get("pool_size", "10"))
    except ValueError:
        raise DriverUrlInvalidError("pool_size must be an integer", detail=mask(url)) from None
    return PgDriver(
        base,
        schema=opts.get("schema") or os.environ.get("JOBS_PG_SCHEMA") or "ujobs",
        pool_size=pool_size,
        wake=flag(opts.get("wake", "1"), "wake", url),
        prepare=flag(opts.get("prepare", "1"), "prepare", url),
        lazy_claim=flag(opts.get("lazy_claim", "0"), "lazy_claim", url),
        listen_url=opts.get("listen_url"),
    )


def _check_libpq_params(base: str, url: str) -> None:
    """Refuse, before any connection, a query parameter libpq does not know (a misspelt driver
    option such as `?shema=`): psycopg would raise it untyped at the first connect."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(libpq_url(base))
    except psycopg.ProgrammingError as exc:
        raise DriverUrlInvalidError(
            f"{mask_text(str(exc).strip(), url)}; the driver's own options are"
            f" {', '.join(DRIVER_OPTIONS)}, the rest go to libpq",
            detail=mask(url),
        ) from None
