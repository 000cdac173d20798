"""Content fingerprints of integer tensors, computed on their device: cache keys for sampler statistics.

Each element ``v_k`` (as int64) at position ``k`` is mixed as ``h_k = (Σ a_i·v_k^i + Σ b_j·k^j + c)² mod p``
with ``p = 2³¹ − 1``, where ``v^0, v^1, v^2`` are bits 0–29, bits 30–59 and the signed top bits 60–63 of ``v``
and ``k^0, k^1`` bits 0–29 and 30 up of ``k``. Every piece lies in (−p, p), so distinct values (or positions)
differ in some piece mod p: values that differ by a multiple of p do not collide as they would if reduced
mod p whole. Every product stays below 2⁶³, so the arithmetic is exact on CPU and GPU alike. The ``h_k`` are
summed; four independent sets of weights and the shape and dtype go into a BLAKE2 digest. Equal tensors give
equal fingerprints on any device; different tensors collide with negligible probability. Not cryptographic.

Shapes:
    tensor: any shape, integer or bool dtype.
"""

from __future__ import annotations

import hashlib

import torch
from torch import Tensor

from graphfuse.graph import Graph

_PRIME = 2_147_483_647
_MASK = (1 << 30) - 1
# (a_0, a_1, a_2, b_0, b_1, c) per mixer; the (a_0, a_1, a_2) and the (b_0, b_1) are linearly independent mod p
_MIXERS = (
    (48_271, 83_003, 27_361, 69_621, 91_381, 12_345),
    (16_807, 54_773, 99_991, 39_373, 75_079, 67_890),
    (40_692, 31_337, 65_537, 40_014, 22_079, 24_680),
    (62_089, 77_153, 11_311, 53_668, 88_883, 13_579),
)
_CHUNK = 1 << 22


def tensor_fingerprint(tensor: Tensor) -> str:
    """A 32-hex-digit fingerprint of an integer or bool tensor's shape, dtype and content."""
    if tensor.is_floating_point() or tensor.is_complex():
        raise TypeError(f"tensor_fingerprint: tensor must have an integer or bool dtype; got {tensor.dtype}")
    flat = tensor.reshape(-1)
    sums = [0] * len(_MIXERS)
    for begin in range(0, flat.numel(), _CHUNK):
        value = flat[begin:begin + _CHUNK].long()
        position = torch.arange(begin, begin + value.numel(), device=flat.device)
        pieces = (value & _MASK, (value >> 30) & _MASK, value >> 60, position & _MASK, position >> 30)
        for m, (*weights, c) in enumerate(_MIXERS):
            mixed = torch.full_like(value, c)
            for weight, piece in zip(weights, pieces):
                mixed.add_(piece, alpha=weight)
            mixed.remainder_(_PRIME)
            sums[m] += int((mixed * mixed).remainder_(_PRIME).sum())
    text = f"{tuple(tensor.shape)}|{tensor.dtype}|{'|'.join(map(str, sums))}"
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def graph_fingerprint(graph: Graph) -> str:
    """Fingerprint of a graph's sizes and ``edge_index`` (cached on the graph)."""
    return graph.cached(
        "fingerprint", lambda: f"{graph.num_src}x{graph.num_dst}:{tensor_fingerprint(graph.edge_index)}"
    )
