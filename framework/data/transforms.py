"""Feature transforms applied by :func:`graphfuse.data.load_dataset`."""

from __future__ import annotations

import torch
from torch import Tensor


def normalize_features(x: Tensor) -> Tensor:
    """Row-normalise features so that every non-zero row sums to 1 (in place, returns ``x``).

    PyG ``NormalizeFeatures`` semantics for the usual non-negative features (bag-of-words, multi-hot):
    ``x / x.sum(-1)`` with all-zero rows left zero. Two details differ from PyG and are deliberate: PyG
    always subtracts the global minimum, here it is subtracted only when negative (so non-negative features
    are never shifted, which matches PyG whenever the minimum is 0, as for Cora and Facebook); and PyG clamps
    the row sum at 1, which leaves rows summing to less than 1 unnormalised, here every row with a positive
    sum is scaled to sum to exactly 1.

    Shapes:
        x: (N, F) floating point; the result has the same shape.
    """
    if not isinstance(x, Tensor) or not x.is_floating_point():
        raise TypeError(f"normalize_features: x must be a floating-point torch.Tensor; got "
                        f"{x.dtype if isinstance(x, Tensor) else type(x).__name__}")
    if x.dim() != 2:
        raise ValueError(f"normalize_features: x must have shape (N, F); got {tuple(x.shape)}")
    if x.numel() == 0:
        return x
    low = x.min()
    if low < 0:
        x.sub_(low)
    row_sum = x.sum(dim=-1, keepdim=True, dtype=torch.promote_types(x.dtype, torch.float32))  # no half overflow
    x.div_(row_sum.masked_fill_(row_sum <= 0, 1.0))
    return x
