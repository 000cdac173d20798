"""GraphSAGE convolution of Hamilton, Ying & Leskovec, "Inductive Representation Learning on Large Graphs"
(NeurIPS 2017)."""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from graphfuse.checks import check_bools
from graphfuse.engine import aggregate
from graphfuse.graph import Graph
from graphfuse.nn.inputs import (
    GraphLike,
    as_graph,
    check_features,
    check_layer_backend,
    check_positive_ints,
    unweighted,
)

AGGRS = ("mean", "max", "pool")


def _widths(in_channels: int | tuple[int, int]) -> tuple:
    """(F_src, F_dst) of ``in_channels``: a pair as given, else the one width twice."""
    return in_channels if isinstance(in_channels, tuple) and len(in_channels) == 2 else (in_channels, in_channels)


class SAGEConv(nn.Module):
    """``x'_i = W_l · aggr_{j ∈ N(i)} x_j + W_r x_i + b`` — Hamilton, Ying & Leskovec, NeurIPS 2017.

    ``aggr`` is ``"mean"``, ``"max"`` (element-wise), or ``"pool"``: max over ``ReLU(W_p x_j + b_p)``, the
    paper's pooling aggregator (PyG's ``aggr="max", project=True``; the root term still uses the raw
    ``x_i``). Nodes without in-edges aggregate to 0. Edge weights of the graph are ignored, as in PyG. The
    neighbourhood work is one :func:`graphfuse.aggregate` call. Matches ``torch_geometric.nn.SAGEConv`` with
    the same parameter names (``lin_l``, ``lin_r``, and ``lin`` for ``"pool"``) and initialisation (arguments
    after ``out_channels`` keyword-only; PyG's ``project`` is ``aggr="pool"``; lazy ``in_channels=-1`` is not
    offered).

    On a bipartite block given one ``x`` (num_src ≥ num_dst) the targets are taken to be the first ``num_dst``
    sources, the convention of sampled mini-batches, so the root term reads ``x[:num_dst]``. PyG's tuple
    ``(x_src, x_dst)`` gives the targets their own features instead (of another width with
    ``in_channels=(F_src, F_dst)``); an edge_index then spans ``x_src.size(0)`` sources and ``x_dst.size(0)``
    targets. ``(x_src, None)`` leaves the root term out, as in PyG, and needs a Graph (it fixes num_dst).

    Args:
        in_channels: input width F, or ``(F_src, F_dst)``: the widths of ``x_src`` and ``x_dst``.
        out_channels: output width.
        aggr: ``"mean"``, ``"max"`` or ``"pool"``.
        root_weight: add the root term ``W_r x_i`` (``W_r`` has no bias).
        normalize: L2-normalise each output row.
        bias: give ``W_l`` a bias ``b``.
        backend: engine backend for the aggregation (None: the default).

    Shapes:
        x: (num_src, F), or a tuple of (num_src, F_src) and (num_dst, F_dst) or None; graph: Graph (square or
        bipartite block) or edge_index (2, E); out: (num_dst, out_channels).
    """

    def __init__(
        self,
        in_channels: int | tuple[int, int],
        out_channels: int,
        *,
        aggr: str = "mean",
        root_weight: bool = True,
        normalize: bool = False,
        bias: bool = True,
        backend: str | None = None,
    ) -> None:
        super().__init__()
        in_src, in_dst = _widths(in_channels)
        check_positive_ints("SAGEConv", in_channels=in_src, out_channels=out_channels)
        if in_dst != in_src:
            check_positive_ints("SAGEConv", in_channels=in_dst)
        check_bools("SAGEConv", root_weight=root_weight, normalize=normalize, bias=bias)
        if aggr not in AGGRS:
            raise ValueError(f"SAGEConv: aggr must be one of {list(AGGRS)}; got {aggr!r}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.aggr = aggr
        self.root_weight = root_weight
        self.normalize = normalize
        check_layer_backend("SAGEConv", backend)
        self.backend = backend
        self.lin = nn.Linear(in_src, in_src) if aggr == "pool" else None
        self.lin_l = nn.Linear(in_src, out_channels, bias=bias)
        self.lin_r = nn.Linear(in_dst, out_channels, bias=False) if root_weight else None

    def reset_parameters(self) -> None:
        for lin in (self.lin, self.lin_l, self.lin_r):
            if lin is not None:
                lin.reset_parameters()

    def forward(self, x: Tensor | tuple[Tensor, Tensor | None], graph: GraphLike) -> Tensor:
        x, root, graph = self._inputs(x, graph)
        x_src = F.relu(self.lin(x)) if self.lin is not None else x
        reduce = "mean" if self.aggr == "mean" else "max"
        out = self.lin_l(aggregate(graph, x_src, reduce=reduce, backend=self.backend))
        if self.lin_r is not None and root is not None:
            out = out + self.lin_r(root)
        return F.normalize(out, p=2.0, dim=-1) if self.normalize else out

    def _inputs(self, x: Any, graph: GraphLike) -> tuple[Tensor, Tensor | None, Graph]:
        """The checked source features, the targets' own features (the root term's; None: none) and the
        unweighted Graph, from one ``x`` or an ``(x_src, x_dst)`` pair."""
        dtype = self.lin_l.weight.dtype
        in_src, in_dst = _widths(self.in_channels)
        if not isinstance(x, tuple):
            check_features("SAGEConv", x, in_src, dtype)
            if in_dst != in_src:
                raise ValueError(f"SAGEConv: in_channels=({in_src}, {in_dst}) needs x = (x_src, x_dst); got one "
                                 "tensor")
            graph = unweighted(as_graph("SAGEConv", x, graph))
            if graph.num_dst > graph.num_src:
                raise ValueError(f"SAGEConv: a bipartite block needs num_dst <= num_src; got {graph}")
            return x, x[: graph.num_dst], graph
        if len(x) != 2:
            raise ValueError(f"SAGEConv: x must be a tensor or a pair (x_src, x_dst); got a tuple of {len(x)}")
        x, root = x
        check_features("SAGEConv", x, in_src, dtype, name="x_src")
        if root is not None:
            check_features("SAGEConv", root, in_dst, dtype, name="x_dst")
            if root.device != x.device:
                raise ValueError(f"SAGEConv: x_dst is on {root.device} but x_src is on {x.device}")
        elif not isinstance(graph, Graph):
            raise ValueError("SAGEConv: x = (x_src, None) leaves the number of targets open; pass a Graph "
                             "(num_src, num_dst), or x_dst")
        graph = unweighted(as_graph("SAGEConv", x, graph, num_dst=None if root is None else root.size(0)))
        return x, root, graph

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, aggr={self.aggr!r}, backend={self.backend!r}"
