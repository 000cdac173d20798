"""Launcher of ES-SpMM (es_spmm.cu): cache-first edge-sampled CSR aggregation for inference.

Each target row keeps at most ``width`` (S) of its entries — all of them when its degree d ≤ S, else S chosen
by ``strategy`` ("bucket": the first S; "fastrand": (s · P) mod d; "random": Floyd's algorithm on a hash of
(seed, row, slot)) — exactly the entries of ``graphfuse.engine.edge_sampling.kept_entries``, and aggregates
over them with the scaling of ``sampled_aggregate`` (sum × d / S where sampled; mean = sample mean; max/min
over the kept entries; 0 for rows without entries). No gradient: inference only.

Mapping: one warp per row (8 per 256-thread block), grid.y over column tiles of 32 · VEC · CF ≤ 512 columns;
the warp caches the kept (col, weight) pairs in dynamic shared memory (``shared_bytes``), then every lane
accumulates VEC-wide loads of x over the cache. For K < 32, VEC = CF = 1 and lanes ≥ K only help sampling.

Shapes:
    rowptr: (R + 1,) int64; col: (nnz,) int32 (the gathered row of ``x`` for each entry);
    x: (num_cols, K); values: (nnz,) in the same (CSR) entry order, or None; out: (R, K).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from . import runtime as rt

FILE = "es_spmm.cu"
STRATEGY_CODES = {"bucket": 0, "fastrand": 1, "random": 2}
MAX_WIDTH = 512  # S * 8 warps * (4 + 8) bytes = 48 KiB of shared memory at most (the default per-block limit)
MAX_TILE = 512  # columns per grid.y tile
WARPS = rt.BLOCK // 32  # rows per block
_SEED_MUL = 0x9E3779B97F4A7C15  # splitmix64's golden-ratio increment


def config(k: int, dtype: torch.dtype, vec: int | None = None) -> tuple[int, int]:
    """(VEC, CF): VEC-wide loads (the widest K allows for aligned operands, or ``vec``) and CF column chunks per
    lane so that one tile of 32 · VEC · CF columns covers up to 512 columns (every tile repeats the row's
    sampling, so few wide tiles beat many narrow ones). K < 32: (1, 1), lanes ≥ K idle in the aggregation."""
    if k < 32:
        return 1, 1
    vec = vec or rt.vector_width(k, dtype, [])
    return vec, min(MAX_TILE // (32 * vec), rt.next_pow2(-(-k // (32 * vec))))


def shared_bytes(width: int, dtype: torch.dtype, weighted: bool, strategy: str) -> int:
    """Dynamic shared memory of one block: 8 warps × S slots × (4-byte column + a weight slot where the kernel
    needs one: weighted, or "random", whose Floyd steps keep 64-bit offsets in the column + weight slots)."""
    staged_w = weighted or strategy == "random"
    return WARPS * width * (4 + (rt.itemsize(dtype) if staged_w else 0))


def check_sampling(op: str, width: object, strategy: object, seed: object) -> None:
    """Raise ValueError naming ``width`` (an int in [1, MAX_WIDTH]), ``strategy`` (a key of ``STRATEGY_CODES``)
    or ``seed`` (an int in [0, 2**63)) of ``op``: the sampling settings, checked alike by :func:`es_spmm` and
    ``graphfuse.EdgeSampling``."""
    if not rt.is_int(width) or not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"{op}: width must be an int in [1, {MAX_WIDTH}]; got {width!r}")
    rt.check_choice(op, "strategy", strategy, STRATEGY_CODES)
    if not rt.is_int(seed) or not 0 <= seed < 2**63:
        raise ValueError(f"{op}: seed must be an int in [0, 2**63); got {seed!r}")


def seed_mix(seed: int) -> int:
    """``seed · 0x9E3779B97F4A7C15 mod 2^64`` as a signed 64-bit integer: the seed term of the splitmix64 hash
    that both this kernel and its reference (``edge_sampling.hash_uniforms``) draw from."""
    z = int(seed) * _SEED_MUL % (1 << 64)  # int(): a NumPy seed overflowed int64 here
    return z - (1 << 64) if z >= 1 << 63 else z


class EsSpmmPlan(rt.Plan):
    """One ES-SpMM configuration with everything but the dense operands fixed (structure, K, dtype, reduce,
    weighted or not, width, strategy, seed): calling it allocates the output and launches once. The engine
    caches plans per graph and sampling; :func:`es_spmm` validates and builds a throwaway one. A misaligned
    ``x`` is served by a scalar-load twin (:class:`~graphfuse.kernels.runtime.Plan`)."""

    def __init__(self, rowptr: Tensor, col: Tensor, *, k: int, dtype: torch.dtype, reduce: str, weighted: bool,
                 width: int, strategy: str, seed: int, vec: int | None = None) -> None:
        width, seed = int(width), int(seed)  # NumPy integers pass check_sampling
        self.rowptr, self.col, self.k, self.dtype, self.reduce, self.weighted = rowptr, col, k, dtype, reduce, weighted
        self.width, self.strategy, self.seed, self.device = width, strategy, seed, rowptr.device
        self.num_rows = rowptr.numel() - 1
        vec_, cf = config(k, dtype, vec)
        self.align = vec_ * rt.itemsize(dtype)
        name, family = _names(rt.ctype(dtype), rt.REDUCE_CODES[reduce], weighted, STRATEGY_CODES[strategy], vec_, cf)
        self.kernel = rt.Kernel(FILE, name, self.device, (-(-self.num_rows // WARPS), -(-k // (32 * vec_ * cf))),
                                (rt.BLOCK,), shared_bytes(width, dtype, weighted, strategy), family)
        self.sizes = (self.num_rows, k, width, seed_mix(seed))

    def __call__(self, x: Tensor, values: Tensor | None = None) -> Tensor:
        """The sampled aggregation of dense ``x`` (weighted by ``values`` when the plan is); shapes as in
        :func:`es_spmm`, unchecked."""
        out = x.new_empty(self.num_rows, self.k)  # x has the plan's dtype and device (as GespmmPlan)
        if self.num_rows == 0 or self.k == 0:
            return out
        return self._for(x, out)._launch(x, values, out)

    def _scalar_twin(self) -> EsSpmmPlan:
        return EsSpmmPlan(self.rowptr, self.col, k=self.k, dtype=self.dtype, reduce=self.reduce,
                          weighted=self.weighted, width=self.width, strategy=self.strategy, seed=self.seed, vec=1)

    def _launch(self, x: Tensor, values: Tensor | None, out: Tensor) -> Tensor:
        self.kernel(rt.ptr(self.rowptr), rt.ptr(self.col), rt.ptr(values), x.data_ptr(), out.data_ptr(), *self.sizes)
        return out


def es_spmm(
    rowptr: Tensor,
    col: Tensor,
    x: Tensor,
    values: Tensor | None = None,
    *,
    width: int,
    strategy: str,
    seed: int = 0,
    reduce: str = "sum",
    validate: bool = True,
) -> Tensor:
    """``out[r] = reduce over the kept entries j of row r of values[j] * x[col[j]]``, scaled (see the module
    docstring); 0 for empty rows.

    Args:
        rowptr, col: the CSR structure (rows are the targets).
        x: dense features gathered through ``col``.
        values: per-entry weights in CSR order ((nnz,)), or None for unweighted.
        width: S, the most entries a row keeps (1 … 512).
        strategy: "bucket", "fastrand" or "random".
        seed: seeds "random"'s hash (an int in [0, 2**63)); ignored by the other strategies.
        reduce: "sum", "mean", "max" or "min".
        validate: check the index values (one host sync; see :func:`graphfuse.kernels.runtime.check_indices`).

    Returns:
        out (R, K), x's dtype.
    """
    _check(rowptr, col, x, values, width, strategy, seed, reduce)
    if validate:
        rt.check_indices("es_spmm", ("rowptr", rowptr, "col", col), [("col", col, x.size(0))])
    plan = EsSpmmPlan(rowptr, col, k=x.size(1), dtype=x.dtype, reduce=reduce, weighted=values is not None,
                      width=width, strategy=strategy, seed=seed)
    return plan(x, values)


def _check(rowptr: Tensor, col: Tensor, x: Tensor, values: Tensor | None, width: int, strategy: str, seed: int,
           reduce: str) -> None:
    """Raise TypeError/ValueError naming the offending argument of :func:`es_spmm` (devices last, so every
    other error can be tested without a GPU)."""
    op = "es_spmm"
    rt.check_choice(op, "reduce", reduce, rt.REDUCE_CODES)
    check_sampling(op, width, strategy, seed)
    rt.check_csr(op, rowptr, col, x)
    if values is not None:
        nnz = col.numel()
        rt.check_tensor(op, "values", values, dtypes=(x.dtype,), ndim=1, shape=(nnz,), shape_text=f"(nnz={nnz},)")
    rt.check_devices(op, {"x": x, "rowptr": rowptr, "col": col, "values": values})


def _name(t: str, red: int, weighted: bool, strategy: int, vec: int, cf: int) -> str:
    return f"es_spmm<{t}, {red}, {rt.cbool(weighted)}, {strategy}, {vec}, {cf}>"


@functools.cache
def _names(t: str, red: int, weighted: bool, strategy: int, vec: int, cf: int) -> tuple[str, tuple[str, ...]]:
    """(kernel, family) of one configuration; the family (compiled in the same NVRTC call) is every reduce,
    weighted and unweighted, with the same type, strategy and tile shape."""
    family = tuple(_name(t, r, w, strategy, vec, cf) for r in range(4) for w in (False, True))
    return _name(t, red, weighted, strategy, vec, cf), family


def instances() -> list[str]:
    """Representative template instances (compiled by the CPU test with nvcc): float and double, every
    strategy and reduce, weighted and unweighted, and the tile shapes :func:`config` picks."""
    shapes = {"float": [(1, 1), (4, 4), (2, 8), (1, 16)], "double": [(1, 1), (2, 8), (1, 16), (2, 1)]}
    names = []
    for t, tiles in shapes.items():
        for strategy in range(3):
            for red in range(4):
                for weighted in (False, True):
                    vec, cf = tiles[(2 * red + weighted + strategy) % len(tiles)]
                    names.append(_name(t, red, weighted, strategy, vec, cf))
    return names
