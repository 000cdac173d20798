"""Content fingerprints of integer tensors: cache keys for sampler statistics.

A fingerprint is a 128-bit BLAKE2b digest of the tensor's shape, dtype and bytes (row-major, in chunks copied
to the host), so equal tensors give equal fingerprints on any device and different tensors collide only with
the probability of a 128-bit hash. Not a secret: anyone can compute it. The host copy runs once per graph
(``graph_fingerprint`` is cached on the graph): about 2 GB and a second or two for a 120M-edge ``edge_index``,
small beside the pre-sampling it keys.

Shapes:
    tensor: any shape, integer or bool dtype.
"""

from __future__ import annotations

import hashlib

from torch import Tensor

from graphfuse.graph import Graph

_CHUNK = 1 << 24  # elements per host copy


def tensor_fingerprint(tensor: Tensor) -> str:
    """A 32-hex-digit fingerprint of an integer or bool tensor's shape, dtype and content."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"tensor_fingerprint: tensor must be a torch.Tensor; got {type(tensor).__name__}")
    if tensor.is_floating_point() or tensor.is_complex():
        raise TypeError(f"tensor_fingerprint: tensor must have an integer or bool dtype; got {tensor.dtype}")
    digest = hashlib.blake2b(f"{tuple(tensor.shape)}|{tensor.dtype}\n".encode(), digest_size=16)
    flat = tensor.reshape(-1)
    for begin in range(0, flat.numel(), _CHUNK):
        digest.update(flat[begin:begin + _CHUNK].cpu().numpy())
    return digest.hexdigest()


def graph_fingerprint(graph: Graph) -> str:
    """Fingerprint of a graph's sizes and ``edge_index`` (cached on the graph)."""
    return graph.cached(
        "fingerprint", lambda: f"{graph.num_src}x{graph.num_dst}:{tensor_fingerprint(graph.edge_index)}"
    )
