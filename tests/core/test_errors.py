"""One table of codes; every code has its class, and its docstring is its default message."""

from __future__ import annotations

import pytest

from jobs_core.errors import CODES, JobsError, error_class, error_for


@pytest.mark.parametrize("code", sorted(CODES))
def test_every_code_has_a_class_whose_docstring_is_its_title(code: str) -> None:
    cls = error_class(code)
    err = error_for(code, detail="the-option")
    assert type(err) is cls and err.code == code and isinstance(err, JobsError)
    assert err.detail == "the-option" and "the-option" in str(err) and code in str(err)
    doc = (cls.__doc__ or "").strip().rstrip(".")
    assert doc[0].lower() + doc[1:] == CODES[code]


def test_an_unknown_code_is_a_driver_error_naming_it() -> None:
    err = error_for("X_NOT_A_CODE")
    assert err.code == "X_DRIVER_ERROR" and "X_NOT_A_CODE" in str(err)


def test_codes_are_stable_x_names() -> None:
    assert all(c.startswith("X_") and c.upper() == c for c in CODES)
