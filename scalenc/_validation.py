"""Parameter checks with one message format, as scikit-learn's:

The 'x' parameter of Y must be <expectation>. Got <value> instead.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable

__all__ = ["check_param", "check_int", "check_real", "check_options"]


def _fail(estimator, name: str, expectation: str, value) -> None:
    raise ValueError(
        f"The {name!r} parameter of {type(estimator).__name__} must be {expectation}. "
        f"Got {value!r} instead."
    )


def check_param(estimator, name: str, value, ok: Callable[[object], bool], expectation: str):
    """Raise the standard ValueError unless ``ok(value)``; return the value."""
    try:
        good = bool(ok(value))
    except Exception:
        good = False
    if not good:
        _fail(estimator, name, expectation, value)
    return value


def check_int(estimator, name: str, value, *, low: int | None = None, allow_none=False):
    """An integer ≥ low (bool is not an integer here)."""
    if value is None and allow_none:
        return value
    expectation = "an int" + (f" in the range [{low}, inf)" if low is not None else "")
    if allow_none:
        expectation += " or None"
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not ok or (low is not None and value < low):
        _fail(estimator, name, expectation, value)
    return int(value)


def check_real(
    estimator,
    name: str,
    value,
    *,
    low: float | None = None,
    high: float | None = None,
    closed: str = "both",
    allow_none: bool = False,
):
    """A real number in an interval; ``closed`` is 'both', 'left', 'right' or 'neither'."""
    if value is None and allow_none:
        return value
    left = "[" if closed in ("both", "left") else "("
    right = "]" if closed in ("both", "right") else ")"
    lo = "-inf" if low is None else low
    hi = "inf" if high is None else high
    expectation = f"a float in the range {left}{lo}, {hi}{right}" + (
        " or None" if allow_none else ""
    )
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok and low is not None:
        ok = value >= low if closed in ("both", "left") else value > low
    if ok and high is not None:
        ok = value <= high if closed in ("both", "right") else value < high
    if not ok:
        _fail(estimator, name, expectation, value)
    return float(value)


def check_options(estimator, name: str, value, options):
    """One of a fixed set of values."""
    if value not in options:
        _fail(estimator, name, f"a str among {sorted(options)}", value)
    return value
