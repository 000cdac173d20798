"""Launcher of the sampling kernel (sampling.cu): Floyd's k-subset draw, one thread per row, and its
plain-PyTorch twin. Used by the neighbour sampler (uniforms from a torch.Generator) and by the engine's
edge-sampled aggregation (uniforms from a hash of seed, row and slot).

Shapes:
    degree: (R,) int64; draws: (R, k) float64 uniform in [0, 1) → picks: (R, k) int64, each row sorted and
    distinct, in [0, max(degree, k)).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import runtime as rt

FILE = "sampling.cu"


def floyd_picks(degree: Tensor, draws: Tensor) -> Tensor:
    """k distinct sorted offsets per row from pre-drawn uniforms; equal, bit for bit, to the PyTorch loop of
    ``graphfuse.samplers.neighbor`` on the same draws (see sampling.cu)."""
    op = "floyd_picks"
    rt.check_tensor(op, "degree", degree, dtypes=(torch.int64,), ndim=1)
    rt.check_tensor(op, "draws", draws, dtypes=(torch.float64,), ndim=2, shape=(degree.numel(), None),
                    shape_text=f"(R={degree.numel()}, k)")
    device = rt.check_devices(op, {"degree": degree, "draws": draws})
    rows, k = draws.shape
    picks = torch.empty(rows, k, dtype=torch.int64, device=device)
    if rows and k:
        rt.launch(FILE, op, device, (-(-rows // rt.BLOCK),), (rt.BLOCK,),
                  (rt.ptr(degree), rt.ptr(draws), rt.ptr(picks), rt.i64(rows), rt.i64(k)))
    return picks


def floyd_picks_reference(degree: Tensor, draws: Tensor) -> Tensor:
    """The PyTorch twin of :func:`floyd_picks` (any device): step ``t`` keeps ``c_t = min(⌊u_t (b_t + 1)⌋, b_t)``
    with ``b_t = max(deg, k) − k + t`` unless an earlier step kept it, else ``b_t`` — a uniformly random
    k-subset; rows are then sorted. A row with deg ≤ k always ends as ``0..k-1`` and is set so; on the others
    the draws do not depend on earlier steps, so only the collision test runs step by step: O(k²) work per row of
    degree > k, in k small launches (every row paid it, so one hub made a CPU batch of thousands of rows slow)."""
    rows, k = draws.shape
    picks = torch.arange(k, device=degree.device).expand(rows, k).clone()
    drawn = (degree > k).nonzero().view(-1)
    if drawn.numel():
        bounds = degree[drawn].unsqueeze(1) - k + torch.arange(k, device=degree.device)
        chosen = torch.minimum((draws[drawn] * (bounds + 1)).long(), bounds)
        for t in range(1, k):
            taken = (chosen[:, :t] == chosen[:, t:t + 1]).any(1)
            chosen[:, t] = torch.where(taken, bounds[:, t], chosen[:, t])
        picks[drawn] = chosen.sort(dim=1).values
    return picks


def floyd(degree: Tensor, draws: Tensor) -> Tensor:
    """:func:`floyd_picks` on CUDA tensors when CuPy is present (one launch), else its twin: the same picks
    from the same draws either way."""
    if degree.is_cuda and rt.is_available():
        return floyd_picks(degree, draws)
    return floyd_picks_reference(degree, draws)


def instances() -> list[str]:
    """The kernel of sampling.cu (compiled by the CPU test with nvcc)."""
    return ["floyd_picks"]
