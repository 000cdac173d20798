"""Launcher of the stable radix sort of node-id keys with carried payloads (radix_sort.cu).

Used by the graph-processing stage on large graphs, whose last passes write the stage's outputs themselves
(``last=``, kernels on radix_sort.cuh). ``bound`` fixes the key bits: ceil(bits / 8) passes of
at most 8 bits each (a 2M-node graph: three 7-bit passes), each a histogram launch, a ``torch.cumsum`` and a
scatter launch; every pass reads and writes the keys and payloads once.

Shapes:
    keys: (n,) int32 or int64 in [0, bound); carry: up to 3 (2 with ``iota``) (n,) tensors of the keys' dtype
    whose values fit int32. Returns the sorted keys and the payloads ((n,) int32 each): with ``iota`` first
    the input position of each sorted entry, then the carried tensors in sorted order.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from . import runtime as rt

FILE = "radix_sort.cu"
BLOCK = 256  # RS_BLOCK
TILE = BLOCK * 16  # RS_TILE
MAX_DIGIT_BITS = 8
INT32_LIMIT = 2**31 - 1


def sort_by_key(keys: Tensor, bound: int, carry: Sequence[Tensor] = (), *, iota: bool = True,
                last: Callable[..., None] | None = None) -> tuple[Tensor, list[Tensor]] | None:
    """Stable sort of ``keys`` (values in [0, bound)) carrying ``carry`` (and the input positions with
    ``iota``); see the module docstring. Values are not range-checked: the caller's counts guarantee them.

    ``last``: replaces the last pass's scatter (and then nothing is returned): called as
    ``last(keys, payloads, shift, bins, hist, ends, tiles)`` with that pass's int32 inputs and histogram, for a
    kernel built on radix_sort.cuh that writes its own outputs from the sorted tile. There are at least two
    passes then, so the inputs are always int32 buffers."""
    op = "sort_by_key"
    rt.check_tensor(op, "keys", keys, dtypes=(torch.int32, torch.int64), ndim=1)
    n = keys.numel()
    payloads = len(carry) + (1 if iota else 0)
    if not 1 <= payloads <= 3:
        raise ValueError(f"{op}: 1 to 3 payloads (carry plus iota); got {payloads}")
    for i, t in enumerate(carry):
        rt.check_tensor(op, f"carry[{i}]", t, dtypes=(keys.dtype,), ndim=1, shape=(n,), shape_text=f"(n={n},)")
    if not rt.is_int(bound) or not 0 < bound <= INT32_LIMIT:
        raise ValueError(f"{op}: bound must be an int in [1, 2^31 - 1]; got {bound!r}")
    if n > INT32_LIMIT:
        raise ValueError(f"{op}: at most 2^31 - 1 entries (int32 positions); got {n}")
    device = rt.check_devices(op, {"keys": keys, **{f"carry[{i}]": t for i, t in enumerate(carry)}})
    bits = max(1, (int(bound) - 1).bit_length())
    passes = max(-(-bits // MAX_DIGIT_BITS), 2 if last else 1)
    digit = -(-bits // passes)
    bins = 1 << digit
    tiles = -(-n // TILE)
    buffers = torch.empty(2, 1 + payloads, n, dtype=torch.int32, device=device)
    if n == 0:
        return None if last else (buffers[0, 0], list(buffers[0, 1:]))
    hist = torch.empty(bins * tiles, dtype=torch.int32, device=device)
    src: list[Tensor | None] = [keys] + ([None] if iota else []) + list(carry)
    for p in range(passes):
        dst = list(buffers[p % 2])
        ctype = "long long" if src[0].dtype == torch.int64 else "int"
        first = p == 0 and iota
        rt.launch(FILE, f"rs_hist<{ctype}>", device, (tiles,), (BLOCK,), (
            rt.ptr(src[0]), n, p * digit, bins, hist.data_ptr(), tiles), family=_family())
        ends = torch.cumsum(hist, 0, dtype=torch.int32)
        if last is not None and p == passes - 1:
            last(src[0], src[1:], p * digit, bins, hist, ends, tiles)
            return None
        pays = src[1:] + [None] * (3 - payloads)
        rt.launch(FILE, f"rs_scatter<{ctype}, {payloads}, {rt.cbool(first)}>", device, (tiles,), (BLOCK,), (
            rt.ptr(src[0]), *(rt.ptr(t) for t in pays), n, p * digit, bins, hist.data_ptr(), ends.data_ptr(), tiles,
            *(rt.ptr(t) for t in dst), *([0] * (3 - payloads))), family=_family())
        src = dst
    return src[0], src[1:]


@functools.cache
def _family() -> tuple[str, ...]:
    return tuple(instances())


def instances() -> list[str]:
    """Every template instance (compiled together on first use; the CPU test compiles them with nvcc)."""
    names = [f"rs_hist<{t}>" for t in ("int", "long long")]
    for t in ("int", "long long"):
        for p in (1, 2, 3):
            names += [f"rs_scatter<{t}, {p}, true>", f"rs_scatter<{t}, {p}, false>"]
    return names
