"""Argument checks shared by every layer of the package (graph processing, samplers, loaders, nn)."""

from __future__ import annotations


def check_bools(owner: str, **values: bool) -> None:
    """Raise TypeError naming the first of ``values`` (on/off switches) that is not a bool: a string such as
    ``"false"`` is truthy and would silently switch the option on."""
    for arg, value in values.items():
        if not isinstance(value, bool):
            raise TypeError(f"{owner}: {arg} must be a bool; got {value!r}")
