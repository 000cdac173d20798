"""Node-induced subgraphs: the edges of a graph whose two endpoints are both in a node set, relabelled.

Each edge is *owned* by its endpoint of lower rank, ranking nodes by total degree (in + out), ties by id
(the orientation used in triangle counting). Extraction expands only the owned edges of the kept nodes and
looks up the other endpoint in the node set, so every induced edge is found exactly once and a hub costs
only its edges to nodes of higher degree, not its whole adjacency: on skewed graphs this reads a small
fraction of Σ degree. The owned adjacency (grouped by owner) is built once per graph and cached on it.

Membership is a dense lookup table of local ids when ``groups × N`` is at most ``MAX_DENSE``, else a binary search
in the sorted keys ``group · N + node``. Everything runs on the graph's device without Python loops.

Shapes:
    nodes: (n,) global node ids; group: (n,) the group (sample, tree) of each node, or None.
    edge_index: (2, e) local ids, row 0 = source, row 1 = target; e_id: (e,) COO ids in the parent graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from graphfuse.checks import check_bools
from graphfuse.graph import Graph

MAX_DENSE = 1 << 22
"""Largest dense id → local-id table a batch allocates and fills (32 MiB of int64); larger node sets are
looked up by binary search in sorted keys, whose cost follows the batch, not the graph."""


@dataclass(frozen=True)
class Subgraph:
    """A node-induced subgraph with its node and edge ids in the parent graph.

    Local node ``k`` is parent node ``n_id[k]``; local edge ``m`` is parent edge ``e_id[m]`` and keeps its
    direction (``edge_index[0]`` = source, ``edge_index[1]`` = target). Edges are sorted by local target,
    then by parent COO id (the parent's CSR order).

    Shapes:
        n_id: (n,) int64, sorted ascending; edge_index: (2, e) int64 local; e_id: (e,) int64.
    """

    n_id: Tensor
    edge_index: Tensor
    e_id: Tensor

    @property
    def num_nodes(self) -> int:
        """n."""
        return self.n_id.numel()

    @property
    def num_edges(self) -> int:
        """e."""
        return self.e_id.numel()

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Subgraph:
        """The same subgraph on ``device``."""
        return Subgraph(*(t.to(device, non_blocking=non_blocking) for t in (self.n_id, self.edge_index, self.e_id)))


class OwnedAdjacency(NamedTuple):
    """Edges grouped by their owner (lower-rank endpoint): ``ptr`` over nodes; per entry the other endpoint,
    the COO edge id and whether the owner is the edge's target."""

    ptr: Tensor
    other: Tensor
    e_id: Tensor
    owner_is_dst: Tensor


def _check_square(graph: Graph, name: str) -> None:
    if not isinstance(graph, Graph):
        raise TypeError(f"{name}: graph must be a graphfuse.Graph; got {type(graph).__name__}")
    if graph.is_bipartite:
        raise ValueError(f"{name}: graph must be square (num_src == num_dst); got num_src={graph.num_src}, "
                         f"num_dst={graph.num_dst}")


def check_node_ids(name: str, arg: str, nodes: object, graph: Graph) -> Tensor:
    """``nodes`` as int64 after checking it is an int64/int32 tensor on ``graph``'s device holding node ids in
    [0, N) (one host sync); raises TypeError/ValueError naming ``name`` and ``arg`` otherwise."""
    if not isinstance(nodes, Tensor) or nodes.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{name}: {arg} must be an int64 or int32 tensor of node ids; got "
                        f"{getattr(nodes, 'dtype', type(nodes).__name__)}")  # float ids would be truncated
    if nodes.dim() != 1:
        raise ValueError(f"{name}: {arg} must be a 1-D tensor of node ids; got shape {tuple(nodes.shape)}")
    if nodes.device != graph.device:
        raise ValueError(f"{name}: {arg} are on {nodes.device} but the graph is on {graph.device}")
    if nodes.numel():
        low, high = torch.stack(torch.aminmax(nodes)).tolist()  # one host sync
        if low < 0 or high >= graph.num_nodes:
            raise ValueError(f"{name}: {arg} must be node ids in [0, {graph.num_nodes}); got values in [{low}, {high}]")
    return nodes.long()


def expand_ranges(start: Tensor, count: Tensor) -> tuple[Tensor, Tensor]:
    """Concatenate the integer ranges ``[start[k], start[k] + count[k])``.

    Returns:
        ``(owner, position)``: for every produced entry the range ``k`` it came from and its value, ranges in
        order, values ascending within a range.

    Shapes:
        start, count: (n,) int64 → owner, position: (Σ count,) int64.
    """
    total = int(count.sum()) if count.numel() else 0
    owner = torch.repeat_interleave(torch.arange(count.numel(), device=count.device), count, output_size=total)
    shift = start - (torch.cumsum(count, 0) - count)
    return owner, torch.arange(total, device=count.device) + shift[owner]


def owned_adjacency(graph: Graph) -> OwnedAdjacency:
    """The degree-ordered orientation of ``graph`` grouped by owner (built once, cached on the graph).

    Shapes:
        ptr: (N + 1,); other, e_id: (E,) int64; owner_is_dst: (E,) bool.
    """

    def build() -> OwnedAdjacency:
        n = graph.num_nodes
        src, dst = graph.edge_index
        degree = graph.in_degree + graph.out_degree
        rank = torch.empty(n, dtype=torch.int64, device=graph.device)
        rank[torch.sort(degree, stable=True).indices] = torch.arange(n, device=graph.device)
        owner_is_dst = rank[dst] < rank[src]
        owner = torch.where(owner_is_dst, dst, src)
        order = torch.sort(owner, stable=True).indices
        ptr = torch.zeros(n + 1, dtype=torch.int64, device=graph.device)
        ptr[1:] = torch.cumsum(torch.zeros(n, dtype=torch.int64, device=graph.device)
                               .index_add_(0, owner, torch.ones_like(owner)), 0)
        other = torch.where(owner_is_dst, src, dst)
        return OwnedAdjacency(ptr, other[order], order, owner_is_dst[order])

    return graph.cached("owned_adjacency", build)


def _lookup(nodes: Tensor, group: Tensor | None, num_nodes: int):
    """A function mapping (node, group) queries to local ids (position in ``nodes``), −1 when absent."""
    num_groups = int(group.max()) + 1 if group is not None and group.numel() else 1
    local = torch.arange(nodes.numel(), device=nodes.device)
    if num_groups * num_nodes <= MAX_DENSE:
        table = torch.full((num_groups * num_nodes,), -1, dtype=torch.int64, device=nodes.device)
        table[nodes if group is None else group * num_nodes + nodes] = local
        return lambda q, g: table[q if g is None else q + g * num_nodes]
    keys = nodes if group is None else group * num_nodes + nodes
    sorted_keys, order = torch.sort(keys)
    last = max(keys.numel() - 1, 0)

    def find(q: Tensor, g: Tensor | None) -> Tensor:
        query = q if g is None else g * num_nodes + q
        if keys.numel() == 0:
            return torch.full_like(query, -1)
        pos = torch.searchsorted(sorted_keys, query).clamp_(max=last)
        return torch.where(sorted_keys[pos] == query, order[pos], -1)

    return find


def induced_edges(
    graph: Graph, nodes: Tensor, group: Tensor | None = None, *, ordered: bool = True
) -> tuple[Tensor, Tensor, Tensor]:
    """All edges ``j → i`` of ``graph`` with ``i`` and ``j`` in ``nodes`` (and in the same ``group``).

    Args:
        graph: a square graph.
        nodes: distinct (within a group) global node ids, in any order; local id ``k`` = position in ``nodes``.
        group: optional group of each node; an edge is kept only between nodes of one group, so several
            subgraphs (or disjoint trees) are extracted in one call.
        ordered: sort the result by local target, then COO id, i.e. CSR order (else the order is unspecified).

    Returns:
        ``(src, dst, e_id)``: local source and target of each kept edge and its COO id in ``graph``.

    Shapes:
        nodes, group: (n,) int64 → src, dst, e_id: (e,) int64.

    Raises:
        TypeError / ValueError: ``nodes`` or ``group`` is not a 1-D integer tensor on the graph's device, a node id
            is out of range, a group is negative, or a node appears twice in one group.
    """
    _check_square(graph, "induced_edges")
    check_bools("induced_edges", ordered=ordered)
    nodes = check_node_ids("induced_edges", "nodes", nodes, graph)
    if group is not None:
        if not isinstance(group, Tensor) or group.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"induced_edges: group must be None or an int64/int32 tensor; got "
                            f"{getattr(group, 'dtype', type(group).__name__)}")
        if group.shape != nodes.shape or group.device != nodes.device:
            raise ValueError(f"induced_edges: group must have the shape and device of nodes, {tuple(nodes.shape)} on "
                             f"{nodes.device}; got {tuple(group.shape)} on {group.device}")
        group = group.long()
        if group.numel() and int(group.min()) < 0:
            raise ValueError(f"induced_edges: group ids must be >= 0; got {int(group.min())}")
    keys = nodes if group is None else group * graph.num_nodes + nodes
    if torch.unique(keys).numel() != keys.numel():
        raise ValueError("induced_edges: nodes must be distinct (within each group)")
    return _induced_edges(graph, nodes, group, ordered=ordered)


def _induced_edges(graph: Graph, nodes: Tensor, group: Tensor | None = None, *, ordered: bool = True
                   ) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`induced_edges` on checked arguments (int64 ids, distinct within a group, on the graph's device)."""
    adjacency = owned_adjacency(graph)
    find = _lookup(nodes, group, graph.num_nodes)
    start = adjacency.ptr[nodes]
    owner, pos = expand_ranges(start, adjacency.ptr[nodes + 1] - start)
    other = find(adjacency.other[pos], None if group is None else group[owner])
    keep = (other >= 0).nonzero().view(-1)
    owner, other, pos = owner[keep], other[keep], pos[keep]
    owner_is_dst = adjacency.owner_is_dst[pos]
    src = torch.where(owner_is_dst, other, owner)
    dst = torch.where(owner_is_dst, owner, other)
    e_id = adjacency.e_id[pos]
    if ordered and e_id.numel():
        order = torch.sort(e_id).indices
        order = order[torch.sort(dst[order], stable=True).indices]
        src, dst, e_id = src[order], dst[order], e_id[order]
    return src, dst, e_id


def induced_subgraph(graph: Graph, nodes: Tensor) -> Subgraph:
    """The subgraph of ``graph`` induced by ``nodes`` (duplicates merged; local id = rank in the sorted set).

    Example:
        >>> g = Graph(torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]]), num_nodes=4)
        >>> induced_subgraph(g, torch.tensor([3, 0, 1])).edge_index
        tensor([[2, 0],
                [0, 1]])

    Shapes:
        nodes: (k,) int64 global ids → :class:`Subgraph` with n ≤ k nodes.
    """
    _check_square(graph, "induced_subgraph")
    nodes = check_node_ids("induced_subgraph", "nodes", nodes, graph)
    n_id = torch.unique(nodes)
    src, dst, e_id = _induced_edges(graph, n_id)
    return Subgraph(n_id=n_id, edge_index=torch.stack([src, dst]), e_id=e_id)
