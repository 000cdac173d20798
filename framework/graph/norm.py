"""Reference (pure PyTorch) graph normalisation: the CPU path and the oracle of the fused GPU stage.

Shapes:
    A graph with E edges becomes a graph with E' = E - (self-loops) + N edges when self-loops are added.
"""

from __future__ import annotations

import torch
from torch import Tensor

from graphfuse.graph.graph import Graph


def add_remaining_self_loops(graph: Graph, fill_value: float = 1.0) -> Graph:
    """Replace existing self-loops by exactly one self-loop per node (PyG's ``add_remaining_self_loops``).

    A node that had a self-loop keeps its weight (1 when unweighted; the last one's, in COO order, for duplicates,
    which alone gets the gradient); others get ``fill_value``.
    Non-loop edges keep their order; the N loops are appended in node order.
    """
    if graph.is_bipartite:
        raise ValueError(f"add_remaining_self_loops: graph must be square; got {graph}")
    src, dst = graph.edge_index
    keep = src != dst
    n = graph.num_nodes
    loops = torch.arange(n, device=graph.device)
    edge_index = torch.cat([graph.edge_index[:, keep], loops.expand(2, n)], dim=1)
    weight = graph.edge_weight
    if weight is None:
        weight = torch.ones(graph.num_edges, device=graph.device)
    if abs(fill_value) > torch.finfo(weight.dtype).max:  # torch.full raised a bare overflow RuntimeError
        raise ValueError(f"add_remaining_self_loops: fill_value must fit the edge weights' {weight.dtype}; got "
                         f"{fill_value!r}")
    loop_weight = torch.full((n,), fill_value, dtype=weight.dtype, device=graph.device)
    if graph.num_edges:  # each node's last self-loop (an index_put with repeated nodes picks any on CUDA, and
        # sends the gradient to every duplicate): a gather by position, no host sync
        position = torch.arange(graph.num_edges, device=graph.device).masked_fill_(keep, -1)
        last = torch.full((n,), -1, device=graph.device).scatter_reduce_(0, src, position, "amax")
        loop_weight = torch.where(last >= 0, weight[last.clamp(min=0)], loop_weight)
    weight = torch.cat([weight[keep], loop_weight])
    return Graph(edge_index, num_nodes=n, edge_weight=weight, validate=False)


def _weighted_in_degree(graph: Graph) -> tuple[Tensor, Tensor]:
    """The edge weights (ones when unweighted) and each target's in-edge weight sum, summed in float32 at least
    (in float16/bfloat16 a sum of ones stops growing at 2048/256)."""
    weight = graph.edge_weight
    if weight is None:
        weight = torch.ones(graph.num_edges, device=graph.device)
    acc = torch.promote_types(weight.dtype, torch.float32)
    deg = torch.zeros(graph.num_dst, dtype=acc, device=graph.device).index_add(0, graph.edge_index[1], weight.to(acc))
    return weight, deg


def gcn_norm(graph: Graph, *, add_self_loops: bool = True, improved: bool = False) -> Graph:
    """Kipf & Welling's symmetric normalisation D^-1/2 (A + I) D^-1/2, degrees taken over targets.

    Args:
        graph: square graph, weighted or not.
        add_self_loops: first give every node one self-loop (:func:`add_remaining_self_loops`: a node that had
            one keeps its weight, 1 when unweighted; the others get 1, or 2 when ``improved``).
        improved: fill value 2 for the added self-loops (``A + 2I`` on a graph without self-loops).

    Returns:
        A new graph whose ``edge_weight`` is ``deg^-1/2[src] · w · deg^-1/2[dst]`` (0 for zero degrees).
    """
    if graph.is_bipartite:
        raise ValueError(f"gcn_norm: graph must be square (num_src == num_dst); got {graph}")
    if add_self_loops:
        graph = add_remaining_self_loops(graph, 2.0 if improved else 1.0)
    src, dst = graph.edge_index
    weight, deg = _weighted_in_degree(graph)
    empty = deg == 0  # divide by 1 there, not 0: a learned weight's gradient would be 0 · inf = NaN (as in PyG)
    deg_inv_sqrt = deg.masked_fill(empty, 1.0).pow(-0.5).masked_fill_(empty, 0.0)
    # index_select: advanced indexing's backward (a learned weight's, through deg) sums in a varying order on CPU
    norm = (deg_inv_sqrt.index_select(0, src) * weight * deg_inv_sqrt.index_select(0, dst)).to(weight.dtype)
    return graph.reweighted(norm)


def mean_norm(graph: Graph) -> Graph:
    """Right (mean) normalisation D_in^-1 A: each edge weighs ``w / Σ w`` over its target's in-edges.

    Used by GraphSAGE-mean and GraphSAINT aggregation; empty rows stay empty, and a target whose in-edge
    weights sum to 0 (masked edges) gets 0 weights, as ``gcn_norm`` does for zero degrees.
    """
    weight, deg = _weighted_in_degree(graph)
    deg = deg.index_select(0, graph.edge_index[1])
    empty = deg == 0  # as in gcn_norm: no 0 / 0 in the forward or the backward
    norm = (weight / deg.masked_fill(empty, 1.0)).masked_fill_(empty, 0.0).to(weight.dtype)
    return graph.reweighted(norm)


def to_dense(graph: Graph, dtype: torch.dtype = torch.float64) -> Tensor:
    """(num_dst, num_src) dense adjacency, ``A[dst, src] = Σ weight`` (duplicates summed): a test oracle."""
    if not isinstance(graph, Graph):
        raise TypeError(f"to_dense: graph must be a graphfuse.Graph; got {type(graph).__name__}")
    weight = graph.edge_weight
    if weight is None:
        weight = torch.ones(graph.num_edges, device=graph.device)
    dense = torch.zeros(graph.num_dst, graph.num_src, dtype=dtype, device=graph.device)
    return dense.index_put_((graph.edge_index[1], graph.edge_index[0]), weight.to(dtype), accumulate=True)
