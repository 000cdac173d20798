"""Cache-first edge sampling for inference (ES-SpMM, Lin et al.; paper 002): aggregate over at most ``width``
in-edges per target.

A target with in-degree ``d ≤ width`` is aggregated exactly. A target with ``d > width`` keeps ``width`` of its
in-edges (CSR order is the edge order within a row), chosen by one of three strategies:

- ``"bucket"``: the first ``width`` entries (the paper's Bucket; depends on the edge order);
- ``"fastrand"``: entry ``(s · P) mod d`` for slot s (the paper's FastRand with P = 577), where P is the first
  of 577, 1009, 1597 that does not divide d — with P = 577 alone a row of 1,154 in-edges would visit only two
  distinct entries;
- ``"random"``: a uniformly random ``width``-subset without replacement (Floyd's algorithm) whose uniforms are a
  hash of (seed, target, slot): the same subset on every device and every call with the same seed.

Scaling: a sampled sum is multiplied by ``d / width`` (unbiased for ``"random"``; a ratio estimate for the
other two), mean divides that by d (so it is the sample mean), max/min take the extremum of the kept entries.
Targets without in-edges get 0. Inference only: the public op refuses tensors that need a gradient.

Shapes: as :func:`graphfuse.aggregate`; the kept entries are CSR positions (M,) with their targets (M,).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from graphfuse.graph import CSR, Graph
from graphfuse.kernels import es_spmm as es_kernels
from graphfuse.kernels import sampling as sampling_kernels

STRATEGIES = tuple(es_kernels.STRATEGY_CODES)  # "bucket", "fastrand", "random"
FASTRAND_PRIMES = (577, 1009, 1597)


@dataclass(frozen=True)
class EdgeSampling:
    """Settings of edge-sampled inference: ``graphfuse.aggregate(..., sampling=EdgeSampling(64, "random"))``.

    Args:
        width: S, the most in-edges kept per target (1 … 512).
        strategy: ``"bucket"``, ``"fastrand"`` or ``"random"`` (see the module docstring).
        seed: seeds ``"random"``'s hash.
    """

    width: int = 64
    strategy: str = "random"
    seed: int = 0

    def __post_init__(self) -> None:
        es_kernels.check_sampling("EdgeSampling", self.width, self.strategy, self.seed)
        object.__setattr__(self, "width", int(self.width))  # a NumPy integer passes the check
        object.__setattr__(self, "seed", int(self.seed))


_current: contextvars.ContextVar[EdgeSampling | None] = contextvars.ContextVar("sampling", default=None)


@contextlib.contextmanager
def use_sampling(sampling: EdgeSampling | None) -> Iterator[None]:
    """Inside the block, every ``graphfuse.aggregate`` call that passes no ``sampling=`` samples with
    ``sampling`` — the model-level switch: ``with torch.no_grad(), use_sampling(EdgeSampling(64)): model(x, g)``
    (layers aggregating through ``aggregate``: GCN, GraphSAGE, GraphSAINT; GAT's fused attention is not
    sampled). None turns it off. The setting is per thread (and asyncio task): another thread's calls keep theirs.
    A call inside the block with gradients enabled raises: the layers' weights would train on sampled messages."""
    if sampling is not None and not isinstance(sampling, EdgeSampling):
        raise TypeError(f"use_sampling: sampling must be a graphfuse.EdgeSampling or None; got "
                        f"{type(sampling).__name__}")
    token = _current.set(sampling)
    try:
        yield
    finally:
        _current.reset(token)


def current_sampling() -> EdgeSampling | None:
    """The sampling :func:`use_sampling` set for the current block (None outside one)."""
    return _current.get()


def _signed(c: int) -> int:
    """A 64-bit constant as the int64 with the same bits (torch multiplies int64 modulo 2^64)."""
    return c - (1 << 64) if c >= 1 << 63 else c


_MIX1, _MIX2 = _signed(0xBF58476D1CE4E5B9), _signed(0x94D049BB133111EB)


def _shr(z: Tensor, s: int) -> Tensor:
    """Logical right shift of int64 bits."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def hash_uniforms(seed: int, rows: Tensor, width: int) -> Tensor:
    """Uniforms in [0, 1) from splitmix64 of (seed, row, slot): 53 bits each, the same on every device.

    Shapes:
        rows: (R,) int64 → (R, width) float64.
    """
    slots = torch.arange(width, device=rows.device)
    z = es_kernels.seed_mix(seed) + rows.unsqueeze(1) * _MIX1 + slots * _MIX2
    z = (z ^ _shr(z, 30)) * _MIX1
    z = (z ^ _shr(z, 27)) * _MIX2
    z = z ^ _shr(z, 31)
    return _shr(z, 11).to(torch.float64) * 2.0**-53


def kept_entries(csr: CSR, sampling: EdgeSampling) -> tuple[Tensor, Tensor, Tensor]:
    """The entries of ``csr`` (rows = targets) each target keeps and the per-target sum scale.

    Returns:
        ``(position, target, scale)``: CSR positions (M,) and their targets (M,) — targets with d ≤ width
        first, in CSR order, then the sampled targets' kept entries in slot order — and
        ``scale`` (R,) float64: d / width where sampled, else 1.
    """
    rowptr = csr.rowptr
    degree = rowptr.diff()
    width = sampling.width
    sampled = degree > width
    rows = torch.arange(degree.numel(), device=rowptr.device)
    exact = (~sampled)[csr.row].nonzero().view(-1)
    big = rows[sampled]
    deg = degree[big].unsqueeze(1)
    slot = torch.arange(width, device=rowptr.device)
    if sampling.strategy == "bucket":
        offset = slot.expand(big.numel(), width)
    elif sampling.strategy == "fastrand":
        stride = torch.full_like(deg, FASTRAND_PRIMES[-1])
        for prime in reversed(FASTRAND_PRIMES[:-1]):
            stride = torch.where(deg % prime != 0, prime, stride)
        offset = (slot * stride) % deg
    else:
        offset = sampling_kernels.floyd(degree[big], hash_uniforms(sampling.seed, big, width))
    position = torch.cat([exact, (rowptr[big].unsqueeze(1) + offset).reshape(-1)])
    target = torch.cat([csr.row[exact], big.repeat_interleave(width)])
    scale = torch.where(sampled, degree.to(torch.float64) / width, 1.0)
    return position, target, scale


def sampled_aggregate(graph: Graph, x: Tensor, edge_weight: Tensor | None, reduce: str,
                      sampling: EdgeSampling) -> Tensor:
    """Reference (plain PyTorch, any device) edge-sampled aggregation; see the module docstring."""
    csr = graph.csr
    position, target, scale = kept_entries(csr, sampling)
    edge = csr.perm[position]
    msg = x.index_select(0, csr.col[position])
    if edge_weight is not None:
        w = edge_weight[edge]
        msg = msg * w.view(*w.shape, *([1] * (x.dim() - w.dim())))
    out = x.new_zeros(graph.num_dst, *x.shape[1:])
    shape = (-1, *([1] * (x.dim() - 1)))
    if reduce in ("max", "min"):
        index = target.view(shape).expand_as(msg)
        return out.scatter_reduce(0, index, msg, "amax" if reduce == "max" else "amin", include_self=False)
    acc = torch.promote_types(x.dtype, torch.float32)  # half precision: a scale d / width can pass float16's max
    out = out.to(acc).index_add(0, target, msg.to(acc))
    if reduce == "mean":  # the mean of the kept entries, as the kernel divides (scaling the sum first can overflow)
        return (out / graph.in_degree.clamp(min=1, max=sampling.width).to(acc).view(shape)).to(x.dtype)
    return (out * scale.to(acc).view(shape)).to(x.dtype)
