"""GraphSAGE convolution of Hamilton, Ying & Leskovec, "Inductive Representation Learning on Large Graphs"
(NeurIPS 2017)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from graphfuse.checks import check_bools
from graphfuse.engine import aggregate
from graphfuse.nn.inputs import (
    GraphLike,
    as_graph,
    check_features,
    check_layer_backend,
    check_positive_ints,
    unweighted,
)

AGGRS = ("mean", "max", "pool")


class SAGEConv(nn.Module):
    """``x'_i = W_l · aggr_{j ∈ N(i)} x_j + W_r x_i + b`` — Hamilton, Ying & Leskovec, NeurIPS 2017.

    ``aggr`` is ``"mean"``, ``"max"`` (element-wise), or ``"pool"``: max over ``ReLU(W_p x_j + b_p)``, the
    paper's pooling aggregator (PyG's ``aggr="max", project=True``; the root term still uses the raw
    ``x_i``). Nodes without in-edges aggregate to 0. Edge weights of the graph are ignored, as in PyG. The
    neighbourhood work is one :func:`graphfuse.aggregate` call. Matches ``torch_geometric.nn.SAGEConv`` with
    the same parameter names (``lin_l``, ``lin_r``, and ``lin`` for ``"pool"``) and initialisation (arguments
    after ``out_channels`` keyword-only; PyG's ``project`` is ``aggr="pool"``; lazy ``in_channels=-1`` and
    ``(x_src, x_dst)`` tuple inputs are not offered).

    On a bipartite block (num_src ≥ num_dst) the targets are taken to be the first ``num_dst`` sources, the
    convention of sampled mini-batches, so the root term reads ``x[:num_dst]``.

    Args:
        in_channels: input width F.
        out_channels: output width.
        aggr: ``"mean"``, ``"max"`` or ``"pool"``.
        root_weight: add the root term ``W_r x_i`` (``W_r`` has no bias).
        normalize: L2-normalise each output row.
        bias: give ``W_l`` a bias ``b``.
        backend: engine backend for the aggregation (None: the default).

    Shapes:
        x: (num_src, in_channels); graph: Graph (square or bipartite block) or edge_index (2, E);
        out: (num_dst, out_channels).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        aggr: str = "mean",
        root_weight: bool = True,
        normalize: bool = False,
        bias: bool = True,
        backend: str | None = None,
    ) -> None:
        super().__init__()
        check_positive_ints("SAGEConv", in_channels=in_channels, out_channels=out_channels)
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
        self.lin = nn.Linear(in_channels, in_channels) if aggr == "pool" else None
        self.lin_l = nn.Linear(in_channels, out_channels, bias=bias)
        self.lin_r = nn.Linear(in_channels, out_channels, bias=False) if root_weight else None

    def reset_parameters(self) -> None:
        for lin in (self.lin, self.lin_l, self.lin_r):
            if lin is not None:
                lin.reset_parameters()

    def forward(self, x: Tensor, graph: GraphLike) -> Tensor:
        check_features("SAGEConv", x, self.in_channels, self.lin_l.weight.dtype)
        graph = unweighted(as_graph("SAGEConv", x, graph))
        if graph.num_dst > graph.num_src:
            raise ValueError(f"SAGEConv: a bipartite block needs num_dst <= num_src; got {graph}")
        x_src = F.relu(self.lin(x)) if self.lin is not None else x
        reduce = "mean" if self.aggr == "mean" else "max"
        out = self.lin_l(aggregate(graph, x_src, reduce=reduce, backend=self.backend))
        if self.lin_r is not None:
            out = out + self.lin_r(x[: graph.num_dst])
        return F.normalize(out, p=2.0, dim=-1) if self.normalize else out

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, aggr={self.aggr!r}, backend={self.backend!r}"
