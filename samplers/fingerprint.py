"""Content fingerprints of integer tensors, computed on their device: cache keys for sampler statistics.

Each element ``v_k`` at position ``k`` is mixed as ``h_k = (a·v_k + b·k + c)² mod p`` with ``p = 2³¹ − 1``
(every product stays below 2⁶³, so the arithmetic is exact on CPU and GPU alike) and the ``h_k`` are summed;
four independent (a, b, c) triples and the shape and dtype go into a BLAKE2 digest. Equal tensors give equal
fingerprints on any device; different tensors collide with negligible probability. Not cryptographic.

Shapes:
    tensor: any shape, integer or bool dtype.
"""

from __future__ import annotations

import hashlib

import torch
from torch import Tensor

from graphfuse.graph import Graph

_PRIME = 2_147_483_647
_MIXERS = ((48_271, 69_621, 12_345), (16_807, 39_373, 67_890), (40_692, 40_014, 24_680), (62_089, 53_668, 13_579))
_CHUNK = 1 << 24


def tensor_fingerprint(tensor: Tensor) -> str:
    """A 32-hex-digit fingerprint of an integer or bool tensor's shape, dtype and content."""
    if tensor.is_floating_point() or tensor.is_complex():
        raise TypeError(f"tensor_fingerprint: tensor must have an integer or bool dtype; got {tensor.dtype}")
    flat = tensor.reshape(-1)
    sums = [0] * len(_MIXERS)
    for begin in range(0, flat.numel(), _CHUNK):
        value = flat[begin:begin + _CHUNK].long().remainder(_PRIME)
        position = torch.arange(begin, begin + value.numel(), device=flat.device).remainder_(_PRIME)
        for m, (a, b, c) in enumerate(_MIXERS):
            mixed = (value * a + position * b + c).remainder_(_PRIME)
            sums[m] += int((mixed * mixed).remainder_(_PRIME).sum())
    text = f"{tuple(tensor.shape)}|{tensor.dtype}|{'|'.join(map(str, sums))}"
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def graph_fingerprint(graph: Graph) -> str:
    """Fingerprint of a graph's sizes and ``edge_index`` (cached on the graph)."""
    return graph.cached(
        "fingerprint", lambda: f"{graph.num_src}x{graph.num_dst}:{tensor_fingerprint(graph.edge_index)}"
    )
