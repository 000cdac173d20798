"""Graph convolution of Kipf & Welling, "Semi-Supervised Classification with Graph Convolutional Networks"
(ICLR 2017)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphfuse.checks import check_bools
from graphfuse.engine import aggregate
from graphfuse.graph import Graph, process_gcn
from graphfuse.nn.inits import glorot_
from graphfuse.nn.inputs import (
    GraphLike,
    as_graph,
    check_features,
    check_layer_backend,
    check_positive_ints,
    weighted_sum_dtype,
    with_edge_weight,
)


class GCNConv(nn.Module):
    """``X' = D^-1/2 (A + I) D^-1/2 X W + b`` — Kipf & Welling, ICLR 2017.

    ``D`` holds the (weighted) in-degrees of ``A + I``. The linear map runs first (it usually shrinks the
    width), then :func:`graphfuse.aggregate` sums the normalised neighbours. The normalised graph comes from
    :func:`graphfuse.gcn_norm` and is cached on the :class:`~graphfuse.Graph` under
    ``("gcn_norm", add_self_loops, improved)``, so full-graph training builds it once; an edge_index input, or
    a call given ``edge_weight``, is wrapped in a fresh Graph and normalised on every call, and so are learned
    edge weights (a Graph whose ``edge_weight`` requires grad), whose gradient flows through the normalisation.
    Matches ``torch_geometric.nn.GCNConv`` in what it offers, ``forward(x, edge_index, edge_weight)`` and
    ``normalize=False`` included (arguments after ``out_channels`` keyword-only; caching is per Graph, so PyG's
    ``cached`` is not needed; lazy ``in_channels=-1`` is not offered).

    Args:
        in_channels: input width F.
        out_channels: output width.
        add_self_loops: use ``A + I`` (existing self-loops are replaced by one per node; PyG's
            ``add_remaining_self_loops``: a node that already had a self-loop keeps that loop's weight, 1 on an
            unweighted graph, and only the others get the fill value). None: ``normalize``, as in PyG; the
            loops come with the normalisation, so True needs ``normalize``.
        improved: fill value 2 instead of 1 (``A + 2I`` on a graph without self-loops), on weighted and
            unweighted graphs alike (PyG 2.8 applies it only to weighted graphs: for an ``edge_index`` without
            weights it keeps ``A + I``). A node that already had a self-loop keeps it as it was, weight 1 when
            unweighted, as in PyG's weighted case.
        normalize: normalise as above; False sums the neighbours with the edge weights as they are (1 when
            unweighted), PyG's ``normalize=False``, and then takes bipartite blocks too.
        bias: add a learnable bias.
        backend: engine backend for the aggregation (None: the default, see :func:`graphfuse.use_backend`).

    Shapes:
        x: (num_src, in_channels); graph: Graph of N nodes (weighted or not; a bipartite block without
        ``normalize``) or edge_index (2, E); edge_weight: (E,) or None; out: (num_dst, out_channels).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        add_self_loops: bool | None = None,
        improved: bool = False,
        normalize: bool = True,
        bias: bool = True,
        backend: str | None = None,
    ) -> None:
        super().__init__()
        check_positive_ints("GCNConv", in_channels=in_channels, out_channels=out_channels)
        check_bools("GCNConv", improved=improved, normalize=normalize, bias=bias)
        if add_self_loops is None:
            add_self_loops = normalize
        check_bools("GCNConv", add_self_loops=add_self_loops)
        if add_self_loops and not normalize:
            raise ValueError("GCNConv: add_self_loops=True needs normalize=True (the self-loops are added by the "
                             "normalisation, as in PyG); pass add_self_loops=False or leave it out")
        self.normalize = normalize
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.add_self_loops = add_self_loops
        self.improved = improved
        check_layer_backend("GCNConv", backend)
        self.backend = backend
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        glorot_(self.lin.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def normalized(self, graph: Graph, dtype: torch.dtype | None = None) -> Graph:
        """``graph`` with GCN edge weights ``deg^-1/2[src] · w · deg^-1/2[dst]``, cached on ``graph`` (rebuilt per
        call when the edge weights are learned). ``dtype``: of the weights of an unweighted graph (the features'
        dtype; None: torch's default), so that a float64 model is normalised in float64 whatever torch's default
        dtype was when the normalisation was first cached. Only a dtype more precise than float32 is used:
        degrees counted in float16/bfloat16 would stop at 2048/256."""
        if graph.edge_weight is None and dtype is not None and torch.finfo(dtype).bits > 32:
            graph = graph.cached(("unit_weights", dtype), lambda: graph.reweighted(
                torch.ones(graph.num_edges, dtype=dtype, device=graph.device)))
        return process_gcn(graph, add_self_loops=self.add_self_loops, improved=self.improved)

    def forward(self, x: Tensor, graph: GraphLike, edge_weight: Tensor | None = None) -> Tensor:
        """``edge_weight``: the edges' weights for this call, as PyG's ``GCNConv(x, edge_index, edge_weight)``; they
        take the place of a Graph's own weights (None: the Graph's, or 1 for an edge_index)."""
        check_features("GCNConv", x, self.in_channels, self.lin.weight.dtype)
        graph = as_graph("GCNConv", x, graph, square=self.normalize)
        if edge_weight is not None:
            graph = with_edge_weight("GCNConv", graph, edge_weight)
        if self.normalize:
            graph = self.normalized(graph, x.dtype)
        # summed in float32 under autocast; a bfloat16 model without it keeps bfloat16 features (see normalized).
        # The linear output is a temporary of the call: no name keeps it alive through the bias add.
        out = aggregate(graph, weighted_sum_dtype(self.lin(x), graph), reduce="sum", backend=self.backend)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, improved={self.improved}, normalize={self.normalize}, "
                f"backend={self.backend!r}")
