"""Argument checks shared by every module: each error names the argument, its value and what is allowed."""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from typing import Any


def _not_bool(name: str, value: Any, allowed: str) -> None:
    """Raise for ``True``/``False`` where a number is expected (Python counts them as 1 and 0)."""
    if isinstance(value, bool):
        raise ValueError(f"{name}={value!r} is not allowed; expected {allowed}, not a boolean")


def positive(name: str, value: Any) -> float:
    """Return ``value`` as a float, or raise if it is not a finite number > 0 (booleans refused)."""
    _not_bool(name, value, "a finite number > 0")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is not a number; expected a finite number > 0") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name}={value!r} is not allowed; expected a finite number > 0")
    return v


def at_least(name: str, value: Any, low: float) -> float:
    """Return ``value`` as a float, or raise if it is not finite and >= ``low`` (booleans refused)."""
    _not_bool(name, value, f"a finite number >= {low}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is not a number; expected a finite number >= {low}") from None
    if not math.isfinite(v) or v < low:
        raise ValueError(f"{name}={value!r} is not allowed; expected a finite number >= {low}")
    return v


def within(name: str, value: Any, low: float, high: float, why: str = "") -> float:
    """Return ``value`` as a float, or raise unless it is a finite number in ``[low, high]``."""
    v = positive(name, value) if low > 0 else at_least(name, value, low)
    if not low <= v <= high:
        raise ValueError(f"{name}={value!r} is not allowed; expected a number in [{low:g}, {high:g}]{why}")
    return v


def int_within(name: str, value: Any, low: int, high: int) -> int:
    """Return ``value`` as an int, or raise unless it is an integer (not a boolean) in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}={value!r} is not allowed; expected an integer in [{low}, {high}]")
    return int(within(name, value, low, high))


def positive_int(name: str, value: Any) -> int:
    """Return ``value`` as an int, or raise if it is not an integer >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int,)) or value < 1:
        if isinstance(value, float) and value.is_integer() and value >= 1:
            return int(value)
        raise ValueError(f"{name}={value!r} is not allowed; expected an integer >= 1")
    return int(value)


def choice(name: str, value: str, allowed: Iterable[str]) -> str:
    """Return ``value`` if it is one of ``allowed``, else raise with a 'did you mean'."""
    allowed = list(allowed)
    if value in allowed:
        return value
    close = difflib.get_close_matches(str(value), allowed, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"{name}={value!r} is not allowed; expected one of {sorted(allowed)}.{hint}")


def at_most(name: str, value: Any, high: float, why: str) -> Any:
    """Return ``value`` unless it exceeds ``high``; the error says ``why`` that is the limit."""
    if value > high:
        raise ValueError(f"{name}={value!r} is not allowed; expected at most {high:g}: {why}")
    return value
