"""Graph attention of Veličković et al., "Graph Attention Networks" (ICLR 2018)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from graphfuse.checks import check_bools, check_finite_real
from graphfuse.engine import gat_aggregate, gat_scores
from graphfuse.engine.attention import FUSED
from graphfuse.graph import Graph, process_gat
from graphfuse.nn.inits import glorot_
from graphfuse.nn.inputs import (
    GraphLike,
    as_graph,
    check_features,
    check_layer_backend,
    check_positive_ints,
    check_rate,
    unweighted,
)


class GATConv(nn.Module):
    """``x'_i = ‖_h Σ_{j ∈ N(i) ∪ {i}} α^h_ij W^h x_j + b``, with
    ``α^h_ij = softmax_j(LeakyReLU(a_src^h · W^h x_j + a_dst^h · W^h x_i))`` — Veličković et al., ICLR 2018.

    The two attention terms are per-node products ``(x W) · a`` (an N × 2H computation);
    :func:`graphfuse.engine.gat_aggregate` turns them into per-edge coefficients (LeakyReLU, edge softmax,
    attention dropout) and takes the per-head weighted sum of the (N, H, C) features — fused CUDA kernels on
    GPU, which build no (E, H, C) message tensor; :func:`graphfuse.edge_softmax` + :func:`graphfuse.aggregate`
    elsewhere, whose reference aggregation of per-head weights does build one, as PyG does. Self-loops (one per node, existing ones replaced) are cached on the
    :class:`~graphfuse.Graph` under ``("add_remaining_self_loops", 1.0)``. Edge weights of the graph are
    ignored, as in PyG. Matches ``torch_geometric.nn.GATConv`` in what it offers (same parameter names, results
    and initialisation, ``return_attention_weights`` included; the arguments after ``heads`` are keyword-only).
    Not offered: PyG's ``edge_dim``, ``fill_value``, ``residual``, lazy ``in_channels=-1`` and bipartite
    ``(x_src, x_dst)`` inputs; each is refused (TypeError or ValueError), never ignored.

    Args:
        in_channels: input width F.
        out_channels: width C of each head.
        heads: number of attention heads H.
        concat: concatenate the heads (output H·C) or average them (output C).
        negative_slope: slope of the LeakyReLU on attention scores.
        dropout: dropout on the normalised attention coefficients during training.
        add_self_loops: let every node attend to itself.
        bias: add a learnable bias.
        backend: engine backend for the softmax and aggregation (None: the default).

    Shapes:
        x: (N, in_channels); graph: Graph of N nodes or edge_index (2, E);
        out: (N, H·C) when ``concat`` else (N, C); with ``return_attention_weights``, also the edge_index the
        attention ran on (2, E') (self-loops included) and its coefficients (E', H).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        heads: int = 1,
        *,
        concat: bool = True,
        negative_slope: float = 0.2,
        dropout: float = 0.0,
        add_self_loops: bool = True,
        bias: bool = True,
        backend: str | None = None,
    ) -> None:
        super().__init__()
        check_positive_ints("GATConv", in_channels=in_channels, out_channels=out_channels, heads=heads)
        check_rate("GATConv", "dropout", dropout)
        check_bools("GATConv", concat=concat, add_self_loops=add_self_loops, bias=bias)
        check_finite_real("GATConv", "negative_slope", negative_slope)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.heads = heads
        self.concat = concat
        self.negative_slope = negative_slope
        self.dropout = float(dropout)
        self.add_self_loops = add_self_loops
        check_layer_backend("GATConv", backend, extra=(FUSED,))
        self.backend = backend
        self.lin = nn.Linear(in_channels, heads * out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        out_width = heads * out_channels if concat else out_channels
        self.bias = nn.Parameter(torch.empty(out_width)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        glorot_(self.lin.weight)
        glorot_(self.att_src)
        glorot_(self.att_dst)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def with_self_loops(self, graph: Graph) -> Graph:
        """``graph`` with exactly one self-loop per node, cached on ``graph`` (see :func:`graphfuse.graph.process_gat`)."""
        return process_gat(graph) if self.add_self_loops else graph

    def forward(self, x: Tensor, graph: GraphLike, *,
                return_attention_weights: bool | None = None) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor]]:
        """``return_attention_weights=True`` returns ``(out, (edge_index, alpha))`` as PyG's GATConv does: the edges
        the attention ran on and their coefficients, after dropout when training (the ones the sum used), computed
        as an (E', H) tensor and summed unfused (:func:`graphfuse.engine.gat_aggregate`). Keyword-only: PyG's
        third positional argument is ``edge_attr``."""
        if return_attention_weights is not None:
            check_bools("GATConv", return_attention_weights=return_attention_weights)
        check_features("GATConv", x, self.in_channels, self.lin.weight.dtype)
        graph = self.with_self_loops(unweighted(as_graph("GATConv", x, graph, square=True)))
        h = self.lin(x).view(-1, self.heads, self.out_channels)
        # under autocast h is float16/bfloat16 while the attention vectors stay float32: the scores and the sum are
        # computed in the promoted dtype, as PyG's (h * att).sum(-1) and h_j * alpha are (so the output is float32
        # with or without bias, and on CUDA the fused kernels take it)
        dtype = torch.promote_types(h.dtype, self.att_src.dtype)
        h = h.to(dtype)
        alpha_src, alpha_dst = gat_scores(h, self.att_src.to(dtype), self.att_dst.to(dtype), backend=self.backend)
        out = gat_aggregate(graph, h, alpha_src, alpha_dst, negative_slope=self.negative_slope,
                            dropout=self.dropout, training=self.training, backend=self.backend,
                            return_attention=bool(return_attention_weights))
        out, alpha = out if return_attention_weights else (out, None)
        out = out.reshape(-1, self.heads * self.out_channels) if self.concat else out.mean(dim=1)
        out = out if self.bias is None else out + self.bias
        return (out, (graph.edge_index, alpha)) if return_attention_weights else out

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, heads={self.heads}, concat={self.concat}, "
                f"dropout={self.dropout}, backend={self.backend!r}")
