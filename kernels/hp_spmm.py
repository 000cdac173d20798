"""Launcher of HP-SpMM (hp_spmm.cu): sum / mean aggregation over the hybrid CSR/COO form, nonzeros split
evenly across workers (Dynamic Task Partition), vectorised loads (Hierarchical Vectorized Memory Access).

The same launcher serves the forward pass (CSR: rows = targets, ``row`` = per-entry target) and the feature
gradient (CSC: rows = sources, ``row`` = per-entry source, gathering the output gradient). Rows cut by a
worker boundary are added atomically into a zeroed output: results may differ run to run in the last bits.

Dynamic Task Partition: NnzPerWarp (entries per worker) is the largest of ``sddmm.NNZ_PER_WARP`` that still
leaves more than ``WAVES`` full waves of blocks (SM count × the compiled kernel's occupancy), and at least 32
for a warp-wide worker (K > 64 in float32), which loads 32 entries at a time.

Shapes:
    rowptr: (R + 1,) int64; row: (nnz,) int64; col: (nnz,) int32; x: (num_cols, K); values: (nnz,) or None
    (in entry order) → out: (R, K).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from . import runtime as rt
from . import sddmm, spmm

FILE = "hp_spmm.cu"
REDUCES = ("sum", "mean")
# Dynamic Task Partition's wave bound (the paper's alpha; HP-SDDMM keeps 2): 8 was the best of 2, 4, 8, 16 and 32
# over the benchmark's RMAT graphs at K = 32 / 64 / 128 in session 36's sweep of every NnzPerWarp on an H200,
# with 32 entries at least for a warp-wide worker (docs/kernel_log.md).
WAVES = 8


class HpSpmmPlan(rt.Plan):
    """One HP-SpMM configuration with everything but the dense operands fixed (structure, K, dtype, reduce,
    weighted or not, the task split): calling it zeroes the output (hp_zero) and launches. The engine caches plans
    per graph; :func:`hp_spmm` builds a throwaway one. ``npw`` fixes NnzPerWarp (None: Dynamic Task
    Partition). A misaligned ``x`` (a view into a larger tensor) is served by a scalar-load twin
    (:class:`~graphfuse.kernels.runtime.Plan`)."""

    def __init__(self, rowptr: Tensor, row: Tensor, col: Tensor, *, k: int, dtype: torch.dtype,
                 reduce: str = "sum", weighted: bool = False, vec: int | None = None,
                 npw: int | None = None) -> None:
        self.rowptr, self.row, self.col = rowptr, row, col
        self.k, self.dtype, self.reduce, self.weighted = k, dtype, reduce, weighted
        self.device = rowptr.device
        self.num_rows = rowptr.numel() - 1
        nnz = col.numel()
        vec_, cf, group = spmm.config(k, dtype, vec)
        self.align = vec_ * rt.itemsize(dtype)
        name, family = _names(rt.ctype(dtype), weighted, reduce == "mean", vec_, cf, group)
        tiles = -(-k // (group * vec_ * cf)) if k else 0
        self.npw = npw or sddmm.NNZ_PER_WARP[0]
        if nnz and k and not npw:
            index = rt.device_index(self.device)
            full = rt.full_wave(FILE, name, index, rt.BLOCK, family)
            self.npw = sddmm.nnz_per_warp(nnz * tiles, full, workers=rt.BLOCK // group, waves=WAVES,
                                          least=32 if group == 32 else sddmm.NNZ_PER_WARP[0])
        workers = -(-nnz // self.npw)
        self.kernel = rt.Kernel(FILE, name, self.device, (-(-workers // (rt.BLOCK // group)), tiles), (rt.BLOCK,),
                                family=family)
        self.numel = self.num_rows * k
        self.zero = rt.Kernel(FILE, f"hp_zero<{rt.ctype(dtype)}, {vec_}>", self.device,
                              (-(-self.numel // (vec_ * rt.BLOCK)),), (rt.BLOCK,), family=family)
        self.structure = (rt.ptr(rowptr), rt.ptr(row), rt.ptr(col))
        self.sizes = (nnz, k, self.npw)

    def __call__(self, x: Tensor, values: Tensor | None = None) -> Tensor:
        """The aggregation of dense ``x`` (weighted by ``values`` when the plan is); shapes as in
        :func:`hp_spmm`, unchecked."""
        out = x.new_empty(self.num_rows, self.k)  # x has the plan's dtype and device (as GespmmPlan); zeroed below
        return self._for(x, out)._launch(x, values, out)

    def _scalar_twin(self) -> HpSpmmPlan:
        return HpSpmmPlan(self.rowptr, self.row, self.col, k=self.k, dtype=self.dtype, reduce=self.reduce,
                          weighted=self.weighted, vec=1, npw=self.npw)

    def _launch(self, x: Tensor, values: Tensor | None, out: Tensor) -> Tensor:
        self.zero(out.data_ptr(), self.numel)
        self.kernel(*self.structure, rt.ptr(values), x.data_ptr(), out.data_ptr(), *self.sizes)
        return out


def hp_spmm(rowptr: Tensor, row: Tensor, col: Tensor, x: Tensor, values: Tensor | None = None, *,
            reduce: str = "sum", validate: bool = True) -> Tensor:
    """``out[r] = reduce_{j in row r} values[j] * x[col[j]]`` (sum, or mean = sum / degree; 0 for empty rows).

    Args:
        rowptr: row offsets; row: the row of each entry (the hybrid form's COO half); col: gathered rows of x.
        x: dense features; values: per-entry weights in entry order, or None (unweighted).
        reduce: "sum" or "mean".
        validate: check the index values (one host sync; see :func:`graphfuse.kernels.runtime.check_indices`).
    """
    op = "hp_spmm"
    rt.check_choice(op, "reduce", reduce, REDUCES)
    rt.check_csr(op, rowptr, col, x)
    nnz = col.numel()
    rt.check_tensor(op, "row", row, dtypes=(torch.int64,), ndim=1, shape=(nnz,), shape_text=f"(nnz={nnz},)")
    if values is not None:
        rt.check_tensor(op, "values", values, dtypes=(x.dtype,), ndim=1, shape=(nnz,), shape_text=f"(nnz={nnz},)")
    rt.check_devices(op, {"x": x, "rowptr": rowptr, "row": row, "col": col, "values": values})
    if validate:
        entry_rows = torch.searchsorted(rowptr[1:], torch.arange(nnz, device=row.device), right=True)
        rt.check_indices(op, ("rowptr", rowptr, "col", col),
                         [("row", row, rowptr.numel() - 1), ("col", col, x.size(0))],
                         [("row must hold each entry's row under rowptr (row[j] = r for rowptr[r] <= j < "
                           "rowptr[r + 1]): the kernel takes row switches from row and ownership from rowptr",
                           row.ne(entry_rows).any())])
    plan = HpSpmmPlan(rowptr, row, col, k=x.size(1), dtype=x.dtype, reduce=reduce, weighted=values is not None)
    return plan(x, values)


@functools.cache
def _names(t: str, weighted: bool, mean: bool, vec: int, cf: int, group: int) -> tuple[str, tuple[str, ...]]:
    """(kernel name, family): the family compiles the weighted/unweighted × sum/mean siblings and the output's
    zeroing kernel (hp_zero) together."""
    name = f"hp_spmm<{t}, {rt.cbool(weighted)}, {rt.cbool(mean)}, {vec}, {cf}, {group}>"
    family = tuple(f"hp_spmm<{t}, {w}, {m}, {vec}, {cf}, {group}>" for w in ("false", "true")
                   for m in ("false", "true")) + (f"hp_zero<{t}, {vec}>",)
    return name, family


def instances() -> list[str]:
    """Representative template instances (compiled by the CPU test with nvcc)."""
    return [f"hp_spmm<{t}, {w}, {m}, {vec}, {cf}, {group}>" for t in ("float", "double")
            for w in ("false", "true") for m in ("false", "true")
            for vec, cf, group in ((1, 1, 1), (1, 1, 8), (1, 2, 32), (4, 1, 8), (2, 2, 32))] + [
        f"hp_zero<{t}, {vec}>" for t, vecs in (("float", (1, 2, 4)), ("double", (1, 2))) for vec in vecs]
