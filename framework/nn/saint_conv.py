"""GraphSAINT layer of Zeng et al., "GraphSAINT: Graph Sampling Based Inductive Learning Method" (ICLR 2020)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphfuse.checks import check_bools
from graphfuse.engine import aggregate
from graphfuse.nn.inits import glorot_
from graphfuse.nn.inputs import (
    GraphLike,
    as_graph,
    check_features,
    check_layer_backend,
    check_positive_ints,
    weighted_sum_dtype,
)

AGGRS = ("mean", "sum")


class GraphSAINTConv(nn.Module):
    """``x'_i = [W_s x_i + b_s ‖ W_n · AGG_{j → i}(w_ji x_j) + b_n]`` — Zeng et al., ICLR 2020.

    The layer of the paper's reference code (its order-1 ``HighOrderAggregator`` with ``aggr="concat"``,
    before activation and normalisation, which the model applies): a self transform and a neighbour transform,
    concatenated, so the output is ``2 · out_channels`` wide. ``AGG`` is one :func:`graphfuse.aggregate` call:
    ``"mean"`` is the weighted sum divided by the in-degree (edge count), ``"sum"`` the weighted sum. The
    weights ``w_ji`` are the graph's ``edge_weight`` (1 when it has none); that is how GraphSAINT's
    aggregation normalisation reaches the layer: a sampler puts ``1 / α_ji`` (times ``1 / deg(i)`` in the
    full graph, for the paper's mean aggregator) in ``Graph.edge_weight`` and the layer runs with
    ``aggr="sum"``. Nodes without
    in-edges get ``b_n`` as their neighbour half. The neighbour transform runs before the aggregation when it
    narrows the features (the two orders agree because ``AGG`` is linear), so the engine moves the smaller
    tensor. Weights are Glorot-uniform and biases zero, as in the reference code.

    On a bipartite block (num_src ≥ num_dst) the targets are taken to be the first ``num_dst`` sources, the
    convention of :class:`~graphfuse.nn.SAGEConv` and of sampled mini-batches, so the self term reads
    ``x[:num_dst]``.

    Args:
        in_channels: input width F.
        out_channels: width of each half; the output is ``2 · out_channels`` wide.
        aggr: ``"mean"`` or ``"sum"`` (use ``"sum"`` with edge weights that are already normalised).
        bias: give both transforms a bias.
        backend: engine backend for the aggregation (None: the default, see :func:`graphfuse.use_backend`).

    Shapes:
        x: (num_src, in_channels); graph: Graph (square or bipartite block, weighted or not) or edge_index
        (2, E); out: (num_dst, 2 · out_channels), the self half first.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        aggr: str = "mean",
        bias: bool = True,
        backend: str | None = None,
    ) -> None:
        super().__init__()
        check_positive_ints("GraphSAINTConv", in_channels=in_channels, out_channels=out_channels)
        if aggr not in AGGRS:
            raise ValueError(f"GraphSAINTConv: aggr must be one of {list(AGGRS)}; got {aggr!r}")
        check_bools("GraphSAINTConv", bias=bias)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.aggr = aggr
        check_layer_backend("GraphSAINTConv", backend)
        self.backend = backend
        self.lin_self = nn.Linear(in_channels, out_channels, bias=bias)
        self.lin_neigh = nn.Linear(in_channels, out_channels, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for lin in (self.lin_self, self.lin_neigh):
            glorot_(lin.weight)
            if lin.bias is not None:
                nn.init.zeros_(lin.bias)

    def forward(self, x: Tensor, graph: GraphLike) -> Tensor:
        check_features("GraphSAINTConv", x, self.in_channels, self.lin_self.weight.dtype)
        graph = as_graph("GraphSAINTConv", x, graph)
        if graph.num_dst > graph.num_src:
            raise ValueError(f"GraphSAINTConv: a bipartite block needs num_dst <= num_src; got {graph}")
        if self.out_channels < self.in_channels:
            neigh = aggregate(graph, weighted_sum_dtype(F.linear(x, self.lin_neigh.weight), graph), reduce=self.aggr,
                              backend=self.backend)
            if self.lin_neigh.bias is not None:
                neigh = neigh + self.lin_neigh.bias
        else:
            neigh = self.lin_neigh(aggregate(graph, weighted_sum_dtype(x, graph), reduce=self.aggr,
                                             backend=self.backend))
        return torch.cat([self.lin_self(x[: graph.num_dst]), neigh], dim=-1)

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, aggr={self.aggr!r}, backend={self.backend!r}"
