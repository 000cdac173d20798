"""Plain-PyTorch twins of every engine op: the CPU path and the oracle for every kernel.

All ops work on a :class:`~graphfuse.graph.Graph` whose edges point from source (row 0) to target
(row 1). They materialise one message per edge (E × F memory), which is what the kernels avoid.

Shapes:
    x: (num_src, F) or (num_src, H, C); edge_weight: (E,), or (E, H) for 3-D x.
    aggregate → (num_dst, F) or (num_dst, H, C); sddmm → (E,) or (E, H); edge_softmax: (E,) or (E, H) → same.
"""

from __future__ import annotations

import torch
from torch import Tensor

from graphfuse.engine.dispatcher import Backend, register_backend
from graphfuse.engine.edge_sampling import sampled_aggregate
from graphfuse.graph import Graph


def _expand_like(index: Tensor, values: Tensor) -> Tensor:
    return index.view(-1, *([1] * (values.dim() - 1))).expand_as(values)


def widened(t: Tensor) -> Tensor:
    """``t`` in float32 when it is float16/bfloat16: sums over edges accumulate there (in half precision a sum of
    ones stops growing at 2048 / 256); the ops cast their results back. The kernel backends widen this way the
    operands they hand to float32/float64-only kernels."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def saveable_weights(edge_weight: Tensor) -> Tensor:
    """``edge_weight``, or a copy of it when it was made under ``torch.inference_mode`` and this call is recorded
    for backward: a product saves its factors, which an inference tensor refuses (the kernel backends' autograd
    Functions copy such operands too, ``autograd._saveable``)."""
    return edge_weight.clone() if torch.is_grad_enabled() and edge_weight.is_inference() else edge_weight


def _weighted_messages(graph: Graph, x: Tensor, edge_weight: Tensor | None) -> Tensor:
    msg = x.index_select(0, graph.edge_index[0])
    if edge_weight is not None:
        edge_weight = saveable_weights(edge_weight)
        msg = msg * edge_weight.view(*edge_weight.shape, *([1] * (x.dim() - edge_weight.dim())))
    return msg


def aggregate(graph: Graph, x: Tensor, edge_weight: Tensor | None = None, reduce: str = "sum") -> Tensor:
    """``out[i] = reduce_{e = (j → i)} w_e · x[j]``; targets without in-edges get 0 for every reduce."""
    msg = _weighted_messages(graph, x, edge_weight)
    dst = graph.edge_index[1]
    if reduce in ("sum", "mean"):
        wide = widened(msg)
        out = wide.new_zeros(graph.num_dst, *x.shape[1:]).index_add(0, dst, wide)
        if reduce == "mean":
            count = graph.in_degree.clamp(min=1).to(out.dtype)
            out = out / count.view(-1, *([1] * (x.dim() - 1)))
        return out.to(x.dtype)
    if reduce in ("max", "min"):
        index = _expand_like(dst, msg)
        best = x.new_zeros(graph.num_dst, *x.shape[1:]).scatter_reduce(
            0, index, msg, "amax" if reduce == "max" else "amin", include_self=False)
        if not msg.requires_grad or graph.num_edges == 0:
            return best
        # Autograd through the chosen entry: among tied entries the first in CSR order (the smallest COO id, CSR
        # being stable within rows), as the kernels do; scatter_reduce's own backward splits ties evenly.
        ids = _expand_like(torch.arange(graph.num_edges, device=dst.device), msg)
        chosen = torch.where(msg.detach() == best.detach().index_select(0, dst), ids, graph.num_edges)
        first = torch.full(best.shape, graph.num_edges, dtype=torch.int64, device=dst.device).scatter_reduce(
            0, index, chosen, "amin")
        picked = msg.gather(0, first.clamp(max=graph.num_edges - 1))
        return torch.where(first < graph.num_edges, picked, best)  # rows without entries or with a NaN: best's
    raise ValueError(f"aggregate: reduce must be one of 'sum', 'mean', 'max', 'min'; got {reduce!r}")


def sddmm(graph: Graph, a: Tensor, b: Tensor, edge_weight: Tensor | None = None) -> Tensor:
    """Per-edge dot products ``out[e] = <a[dst_e], b[src_e]>`` (per head for 3-D inputs), times ``w_e``; half
    precision summed in float32, as a matrix product does."""
    src, dst = graph.edge_index
    out = (widened(a).index_select(0, dst) * widened(b).index_select(0, src)).sum(-1)
    if edge_weight is not None:
        out = out * saveable_weights(edge_weight).view(-1, *([1] * (out.dim() - 1)))
    return out.to(a.dtype)


def edge_softmax(graph: Graph, scores: Tensor) -> Tensor:
    """Softmax of edge scores over each target's in-edges (max-subtracted, per head)."""
    dst = graph.edge_index[1]
    wide = widened(scores)
    row_max = wide.new_zeros(graph.num_dst, *scores.shape[1:]).scatter_reduce(
        0, _expand_like(dst, scores), wide.detach(), "amax", include_self=False
    )
    exp = (wide - row_max.index_select(0, dst)).exp()
    denom = exp.new_zeros(graph.num_dst, *scores.shape[1:]).index_add(0, dst, exp)
    return (exp / denom.index_select(0, dst)).to(scores.dtype)


register_backend(
    Backend(
        name="reference",
        ops={"aggregate": aggregate, "sddmm": sddmm, "edge_softmax": edge_softmax,
             "sampled_aggregate": sampled_aggregate},
        devices=frozenset({"cpu", "cuda"}),
        deterministic_on=frozenset({"cpu"}),
        torch_deterministic=True,  # on CUDA under torch.use_deterministic_algorithms(True) (index_add_ and co.)
        priority=-100,
    )
)
