"""Launcher of HP-SDDMM (sddmm.cu): per-edge, per-head dot products over the hybrid CSR/COO form.

``out[perm[j], h] = scale[perm[j]] · <a[row[j], h, :], b[col[j], h, :]>`` for every CSR entry j: row = target,
col = source, perm = COO id, so ``out`` comes back in COO edge order. Deterministic (no atomics).

Dynamic Task Partition: NnzPerWarp (tasks per warp; a task is one (entry, head) pair) is the largest of
``NNZ_PER_WARP`` that still leaves more than ``WAVE_FACTOR`` full waves of blocks (SM count × the kernel's
occupancy), the HP-SpMM paper's bound ``tasks / (NnzPerWarp · WarpsPerBlock) > α · FullWaveSize``; small
inputs get 8. Larger values reuse more of ``a``'s row per warp, smaller ones fill the GPU.

Shapes:
    row: (nnz,) int64; col: (nnz,) int32; perm: (nnz,) int64; a: (num_dst, H·C); b: (num_src, H·C);
    scale: (E,) or None; out: (E,) for H = 1, else (E, H), with E = nnz.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import runtime as rt

FILE = "sddmm.cu"
NNZ_PER_WARP = (8, 32, 64, 128, 256, 512)
WAVE_FACTOR = 2
MAX_CF = 8


def config(c: int, dtype: torch.dtype, tensors: list[Tensor]) -> tuple[int, int, int]:
    """(VEC, CF, GROUP): the widest aligned vector dividing C, GROUP lanes (a power of two, at most 32) per
    task, CF vectors per lane so that one tile covers C when it can (beyond 32 · VEC · MAX_CF, tiles loop)."""
    vec = rt.vector_width(c, dtype, tensors, lanes=1)
    lanes = -(-c // vec)
    group = min(32, rt.next_pow2(lanes))
    return vec, min(MAX_CF, rt.next_pow2(-(-lanes // group))), group


def nnz_per_warp(tasks: int, full_wave: int, workers: int = rt.BLOCK // 32, *, waves: float = WAVE_FACTOR,
                 least: int = NNZ_PER_WARP[0]) -> int:
    """The largest NnzPerWarp keeping ``tasks / (NnzPerWarp · workers per block) > waves · full_wave``, and at
    least ``least`` (a worker is a warp here; HP-SpMM's workers below K = 32 are groups of fewer lanes, and it
    passes its own ``waves`` and ``least``)."""
    for npw in reversed(NNZ_PER_WARP):
        if npw >= least and tasks / (npw * workers) > waves * full_wave:
            return npw
    return least


def hp_sddmm(row: Tensor, col: Tensor, perm: Tensor, a: Tensor, b: Tensor, *, heads: int = 1,
             scale: Tensor | None = None, validate: bool = True) -> Tensor:
    """Per-edge dot products (see the module docstring). ``a`` and ``b`` hold ``heads`` blocks of C columns.
    ``validate``: check the index values (one host sync; see :func:`graphfuse.kernels.runtime.check_indices`)."""
    op = "hp_sddmm"
    rt.check_tensor(op, "a", a, dtypes=rt.FLOAT_DTYPES, ndim=2)
    k = a.size(1)
    rt.check_tensor(op, "b", b, dtypes=(a.dtype,), ndim=2, shape=(None, k), shape_text=f"(num_src, K={k})")
    c = rt.check_heads(op, k, heads)
    rt.check_tensor(op, "row", row, dtypes=(torch.int64,), ndim=1)
    nnz = row.numel()
    for name, t, dtype in (("col", col, torch.int32), ("perm", perm, torch.int64)):
        rt.check_tensor(op, name, t, dtypes=(dtype,), ndim=1, shape=(nnz,), shape_text=f"(nnz={nnz},)")
    if scale is not None:
        rt.check_tensor(op, "scale", scale, dtypes=(a.dtype,), ndim=1, shape=(nnz,), shape_text=f"(E={nnz},)")
    device = rt.check_devices(op, {"a": a, "b": b, "row": row, "col": col, "perm": perm, "scale": scale})
    if validate:
        rt.check_indices(op, None, [("row", row, a.size(0)), ("col", col, b.size(0)), ("perm", perm, nnz)],
                         [rt.permutation_rule("perm", perm)])
    out = torch.empty((nnz,) if heads == 1 else (nnz, heads), dtype=a.dtype, device=device)
    if nnz == 0 or c == 0:
        return out.zero_() if c == 0 else out
    vec, cf, group = config(c, a.dtype, [a, b])
    name = f"hp_sddmm<{rt.ctype(a.dtype)}, {vec}, {cf}, {group}>"
    index = rt.device_index(device)
    tasks = nnz * heads
    npw = nnz_per_warp(tasks, rt.full_wave(FILE, name, index, rt.BLOCK))
    warps = -(-tasks // npw)
    rt.launch(FILE, name, device, (-(-warps // (rt.BLOCK // 32)),), (rt.BLOCK,), (
        rt.ptr(row), rt.ptr(col), rt.ptr(perm), rt.ptr(a), rt.ptr(b), rt.ptr(scale), rt.ptr(out),
        nnz, heads, c, npw))
    return out


def instances() -> list[str]:
    """Representative template instances (compiled by the CPU test with nvcc)."""
    return [f"hp_sddmm<{t}, {vec}, {cf}, {group}>" for t in ("float", "double")
            for vec, cf, group in ((1, 1, 1), (1, 1, 8), (2, 1, 32), (4, 2, 32), (1, 8, 32))]
