"""Argument checks shared by every layer of the package (graph processing, samplers, loaders, nn)."""

from __future__ import annotations

import math
import numbers


def check_bools(owner: str, **values: bool) -> None:
    """Raise TypeError naming the first of ``values`` (on/off switches) that is not a bool: a string such as
    ``"false"`` is truthy and would silently switch the option on."""
    for arg, value in values.items():
        if not isinstance(value, bool):
            raise TypeError(f"{owner}: {arg} must be a bool; got {value!r}")


def is_int(value: object) -> bool:
    """Whether ``value`` is an integer (a NumPy one too), not a bool: the test of every count, width, budget and
    seed argument; the caller stores ``int(value)``."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_finite_real(owner: str, arg: str, value: object) -> None:
    """Raise naming ``arg`` unless ``value`` is a finite real number (a NumPy one too, not a bool): TypeError for
    another type, ValueError for inf or NaN."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{owner}: {arg} must be a real number; got {value!r}")
    if not is_finite_real(value):
        raise ValueError(f"{owner}: {arg} must be a finite real number; got {value!r}")


def is_finite_real(value: object) -> bool:
    """Whether ``value`` is a real number (a NumPy one too, not a bool) that is neither infinite nor NaN; the
    callers add their own bounds."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and -math.inf < value < math.inf
