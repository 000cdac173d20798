"""Parameter initialisers shared by the layers (PyG's ``glorot`` semantics)."""

from __future__ import annotations

import math

import torch
from torch import Tensor


@torch.no_grad()
def glorot_(tensor: Tensor) -> Tensor:
    """Glorot/Xavier uniform in place, ``U(-a, a)`` with ``a = sqrt(6 / (fan_in + fan_out))``.

    The fans are the last two dimensions, as in PyG's ``glorot``: for a ``(1, H, C)`` attention vector that is
    ``H + C``, where ``torch.nn.init.xavier_uniform_`` would use ``H·C + C``. For 2-D weights the two agree.
    """
    bound = math.sqrt(6.0 / (tensor.size(-2) + tensor.size(-1)))
    return tensor.uniform_(-bound, bound)
