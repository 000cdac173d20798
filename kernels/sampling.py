"""Launcher of the neighbour-sampling kernel (sampling.cu): Floyd's k-subset draw, one thread per row.

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


def instances() -> list[str]:
    """The kernel of sampling.cu (compiled by the CPU test with nvcc)."""
    return ["floyd_picks"]
