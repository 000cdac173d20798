"""Neighbour sampling with the semantics of PyG's ``NeighborLoader`` (Hamilton et al., NeurIPS 2017),
vectorised on the graph's device.

The neighbours of ``i`` are the sources ``j`` of its in-edges ``j → i`` (CSR by target). Hop ``l`` expands the
nodes added in hop ``l − 1`` (hop 1: the seeds) and takes ``num_neighbors[l]`` of each one's neighbours:
all of them for −1; without replacement ``min(k, deg)`` distinct ones (Floyd's algorithm, one vectorised
step per pick, then in CSR order); with replacement ``k`` uniform draws (none when deg = 0). A sampled
neighbour already in the subgraph keeps its local id and is not expanded again; new ones get the next ids in
the order they were sampled. The seeds are the first ``batch_size`` local nodes.

Sampled edges come as local ``edge_index`` with row 0 = the neighbour and row 1 = the node that sampled it
(the message direction), hop by hop, each hop's edges grouped by sampling node in frontier order.
``subgraph_type``: ``"directional"`` keeps exactly the sampled edges; ``"bidirectional"`` adds the reverse of
each and coalesces (sorted by target, then source; duplicates merged; a reverse-only edge carries the
``e_id`` of the edge it mirrors, as in PyG); ``"induced"`` keeps every edge of the graph between sampled
nodes once, target by target in local order (in-edges in CSR order), a repeated seed's edges on its first
row. ``disjoint=True`` grows one tree per seed: the same node reached from two seeds appears twice, and
``batch`` gives each node's seed.

Shapes:
    seeds: (B,) int64 → n_id: (n,), edge_index: (2, e), e_id: (e,), batch: (n,) (disjoint only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from graphfuse.checks import check_bools, is_int
from graphfuse.graph import Graph
from graphfuse.kernels import sampling as sampling_kernels
from graphfuse.samplers.saint import check_generator
from graphfuse.samplers.subgraph import (
    MAX_DENSE,
    _check_square,
    _induced_edges,
    check_node_ids,
    expand_ranges,
)

SUBGRAPH_TYPES = ("directional", "bidirectional", "induced")


class SampledEdges(NamedTuple):
    """One hop: for each sampled edge ``nbr → nodes[owner]``, its position ``owner`` in the frontier."""

    owner: Tensor
    nbr: Tensor
    e_id: Tensor


def _floyd_picks(degree: Tensor, k: int, generator: torch.Generator | None) -> Tensor:
    """k distinct offsets in ``[0, max(deg, k))`` per row (Floyd's algorithm, graphfuse.kernels.sampling),
    sorted ascending, from uniforms drawn with ``generator``. A row with deg ≤ k gets ``0..k-1``; the caller
    masks offsets ≥ deg.

    Shapes:
        degree: (R,) → (R, k) int64.
    """
    draws = torch.rand(degree.numel(), k, dtype=torch.float64, device=degree.device, generator=generator)
    return sampling_kernels.floyd(degree, draws)


def sample_neighbors(
    graph: Graph,
    nodes: Tensor,
    num_neighbors: int,
    *,
    replace: bool = False,
    generator: torch.Generator | None = None,
) -> SampledEdges:
    """One hop of neighbour sampling: up to ``num_neighbors`` in-edges ``j → i`` of every ``i`` in ``nodes``.

    Args:
        graph: a square graph (its CSR by target is built and cached on first use).
        nodes: the nodes to expand (duplicates are expanded independently).
        num_neighbors: −1 for all in-edges, else k ≥ 0 (without replacement, a k of at least the graph's largest
            in-degree takes all in-edges as −1 does, drawing nothing).
        replace: draw k in-edges uniformly with replacement instead of min(k, deg) distinct ones.
        generator: random generator on the graph's device.

    Returns:
        :class:`SampledEdges` grouped by ``owner`` in ascending order; within an owner, CSR order (all, or
        without replacement) or draw order (with replacement).

    Shapes:
        nodes: (F,) int64 → owner, nbr, e_id: (T,) int64.
    """
    _check_square(graph, "sample_neighbors")
    check_generator(generator, graph.device, "sample_neighbors")
    nodes = check_node_ids("sample_neighbors", "nodes", nodes, graph)
    check_bools("sample_neighbors", replace=replace)
    if not is_int(num_neighbors) or num_neighbors < -1:
        raise ValueError(f"sample_neighbors: num_neighbors must be an int ≥ -1 (-1: all in-edges); got "
                         f"{num_neighbors!r}")
    return _hop(graph, nodes, int(num_neighbors), replace, generator)


def _hop(graph: Graph, nodes: Tensor, k: int, replace: bool, generator: torch.Generator | None) -> SampledEdges:
    """:func:`sample_neighbors` on checked arguments (``nodes`` int64 ids on the graph's device)."""
    rowptr, col, perm, _ = graph.csr
    start = rowptr[nodes]
    degree = graph.in_degree[nodes]
    if k >= _max_in_degree(graph) and not replace:  # every in-edge, as -1 (Floyd's draws cost ~k² per row)
        k = -1
    if k < 0:
        owner, pos = expand_ranges(start, degree)
        return SampledEdges(owner, col[pos], perm[pos])
    if k == 0 or nodes.numel() == 0:
        empty = torch.empty(0, dtype=torch.int64, device=graph.device)
        return SampledEdges(empty, empty, empty)
    if replace:
        draws = torch.rand(nodes.numel(), k, dtype=torch.float64, device=graph.device, generator=generator)
        offset = torch.minimum((draws * degree.unsqueeze(1)).long(), (degree - 1).clamp(min=0).unsqueeze(1))
        valid = (degree > 0).unsqueeze(1).expand(-1, k)
    else:
        offset = _floyd_picks(degree, k, generator)
        valid = offset < degree.unsqueeze(1)
    flat = valid.reshape(-1).nonzero().view(-1)
    owner = flat.div(k, rounding_mode="floor")
    pos = (start.unsqueeze(1) + offset).view(-1)[flat]
    return SampledEdges(owner, col[pos], perm[pos])


def _max_in_degree(graph: Graph) -> int:
    """The graph's largest in-degree (0 without edges), read once per graph."""
    return graph.cached(("sampling", "max_in_degree"),
                        lambda: int(graph.in_degree.max()) if graph.num_dst and graph.num_edges else 0)


@dataclass(frozen=True)
class NeighborSample:
    """A sampled computation subgraph. The first ``batch_size`` local nodes are the seeds, in order.

    Shapes:
        n_id: (n,) global ids; edge_index: (2, e) local, row 0 = neighbour, row 1 = the node it feeds;
        e_id: (e,) COO ids in the parent graph; batch: (n,) seed index of each node (disjoint) or None.
        num_sampled_nodes: (num_hops + 1) counts, seeds first; num_sampled_edges: num_hops counts
        (directional only, else None).
    """

    n_id: Tensor
    edge_index: Tensor
    e_id: Tensor
    batch_size: int
    num_sampled_nodes: tuple[int, ...]
    num_sampled_edges: tuple[int, ...] | None
    batch: Tensor | None = None

    @property
    def num_nodes(self) -> int:
        """n."""
        return self.n_id.numel()


class _NodeMap:
    """The sampled node set of one tree: a dense (N,) map global id → local id (-1 = unseen), used while N is
    at most ``MAX_DENSE`` (a fill per batch; larger graphs take :class:`_KeySet`, which costs no (N,) memory).

    ``add(cand, count)`` looks up candidate nodes, gives the unseen ones the local ids ``count, count + 1, …``
    in order of first appearance, and returns the candidates' local ids and the new nodes, with one host sync
    (the number of new nodes). ``find(keys)`` gives local ids (a repeated seed: its first row).
    """

    def __init__(self, n: int, seeds: Tensor) -> None:
        self.local = torch.full((n,), -1, dtype=torch.int64, device=seeds.device)
        self.local.scatter_reduce_(0, seeds, torch.arange(seeds.numel(), device=seeds.device), "amin",
                                   include_self=False)
        self.first = torch.empty_like(self.local)  # scratch: a candidate node's first position (see add)

    def find(self, keys: Tensor) -> Tensor:
        return self.local[keys]

    def add(self, cand: Tensor, count: int) -> tuple[Tensor, Tensor]:
        # first appearances through the dense scratch (an "amin" scatter of positions reads only what it writes),
        # not a sort: the unseen candidates at their first position are the new nodes, in order
        local = self.local[cand]
        position = torch.arange(cand.numel(), device=cand.device)
        self.first.scatter_reduce_(0, cand, position, "amin", include_self=False)
        first = self.first[cand]
        head = (first == position) & (local < 0)
        rank = torch.cumsum(head, 0) - 1
        local = torch.where(local < 0, count + rank[first], local)
        new = cand[head]  # the host sync: the number of new nodes
        self.local[new] = torch.arange(count, count + new.numel(), device=cand.device)
        return local, new


class _KeySet:
    """A node set as sorted keys with their local ids: ``tree · N + node`` in ``disjoint`` mode (a dense map
    would need B · N entries), the node ids of graphs over ``MAX_DENSE`` nodes. Same contract as
    :class:`_NodeMap`."""

    def __init__(self, keys: Tensor) -> None:
        keys, order = torch.sort(keys, stable=True)
        head = torch.ones_like(keys, dtype=torch.bool)
        head[1:] = keys[1:] != keys[:-1]
        self.keys, self.local_of_key = keys[head], order[head]

    def find(self, keys: Tensor) -> Tensor:
        pos = torch.searchsorted(self.keys, keys).clamp_(max=max(self.keys.numel() - 1, 0))
        return torch.where(self.keys[pos] == keys, self.local_of_key[pos], -1)

    def add(self, cand: Tensor, count: int) -> tuple[Tensor, Tensor]:
        local = self.find(cand)
        missing = (local < 0).nonzero().view(-1)
        new, rank = _first_occurrence(cand[missing])
        local[missing] = count + rank
        self.keys, merge = torch.sort(torch.cat([self.keys, new]))
        new_local = torch.arange(count, count + new.numel(), device=cand.device)
        self.local_of_key = torch.cat([self.local_of_key, new_local])[merge]
        return local, new


def _first_occurrence(keys: Tensor) -> tuple[Tensor, Tensor]:
    """Distinct keys in order of first appearance, and for every key the rank of its distinct value.

    Shapes:
        keys: (T,) → distinct: (U,), rank: (T,) in [0, U).
    """
    sorted_keys, order = torch.sort(keys, stable=True)
    head = torch.ones_like(sorted_keys, dtype=torch.bool)
    head[1:] = sorted_keys[1:] != sorted_keys[:-1]
    group = torch.cumsum(head, 0) - 1
    first_position = order[head]
    appearance = torch.argsort(first_position)
    rank_of_group = torch.empty_like(appearance)
    rank_of_group[appearance] = torch.arange(appearance.numel(), device=keys.device)
    rank = torch.empty_like(keys)
    rank[order] = rank_of_group[group]
    return keys[first_position[appearance]], rank


def _coalesce(row: Tensor, col: Tensor, e_id: Tensor, num_nodes: int) -> tuple[Tensor, Tensor, Tensor]:
    """Sort edges by (col, row) and merge duplicates, keeping the ``e_id`` of the first one (stable)."""
    key = col * num_nodes + row
    key, order = torch.sort(key, stable=True)
    head = torch.ones_like(key, dtype=torch.bool)
    head[1:] = key[1:] != key[:-1]
    return row[order][head], col[order][head], e_id[order][head]


@dataclass(frozen=True)
class NeighborSampler:
    """PyG ``NeighborLoader``-style multi-hop neighbour sampler (see the module docstring for semantics).

    Args:
        num_neighbors: fan-out per hop; −1 takes every neighbour.
        replace: sample with replacement.
        subgraph_type: ``"directional"``, ``"bidirectional"`` or ``"induced"``.
        disjoint: one tree per seed, with a ``batch`` vector.

    Example:
        >>> sampler = NeighborSampler([15, 10, 5])
        >>> out = sampler(graph, torch.tensor([4, 8, 15]), torch.Generator().manual_seed(0))
        >>> out.n_id[:3]
        tensor([ 4,  8, 15])
    """

    num_neighbors: tuple[int, ...]
    replace: bool = False
    subgraph_type: str = "directional"
    disjoint: bool = False

    def __post_init__(self) -> None:
        if is_int(self.num_neighbors) or isinstance(self.num_neighbors, str) or not isinstance(
                self.num_neighbors, Sequence):
            raise TypeError(f"NeighborSampler: num_neighbors must be a sequence of ints (one per hop); got "
                            f"{self.num_neighbors!r}")
        fanouts = tuple(self.num_neighbors)
        if any(not is_int(k) or k < -1 for k in fanouts):
            raise ValueError(f"NeighborSampler: num_neighbors entries must be ints ≥ -1; got {list(fanouts)}")
        object.__setattr__(self, "num_neighbors", tuple(int(k) for k in fanouts))
        check_bools("NeighborSampler", replace=self.replace, disjoint=self.disjoint)
        if self.subgraph_type not in SUBGRAPH_TYPES:
            raise ValueError(f"NeighborSampler: subgraph_type must be one of {list(SUBGRAPH_TYPES)}; got "
                             f"{self.subgraph_type!r}")

    @property
    def num_hops(self) -> int:
        return len(self.num_neighbors)

    def __call__(self, graph: Graph, seeds: Tensor, generator: torch.Generator | None = None) -> NeighborSample:
        """Sample the computation subgraph of ``seeds``.

        Args:
            graph: a square graph on the device to sample on.
            seeds: seed nodes (distinct unless ``disjoint``; a repeated seed keeps its rows but neighbours
                link to its first row).
            generator: random generator on the graph's device.

        Shapes:
            seeds: (B,) int64 → :class:`NeighborSample`.
        """
        _check_square(graph, "NeighborSampler")
        check_generator(generator, graph.device, "NeighborSampler")
        seeds = check_node_ids("NeighborSampler", "seeds", seeds, graph)  # one sync (the sampling has several)
        n, device = graph.num_nodes, graph.device
        num_seeds = seeds.numel()
        tree = torch.arange(num_seeds, device=device) if self.disjoint else None
        if self.disjoint:
            node_set = _KeySet(tree * n + seeds)
        else:
            node_set = _NodeMap(n, seeds) if n <= MAX_DENSE else _KeySet(seeds)

        nodes, trees = [seeds], [tree]
        rows, cols, e_ids = [], [], []
        num_sampled_nodes, num_sampled_edges = [num_seeds], []
        frontier, frontier_tree, frontier_start, count = seeds, tree, 0, num_seeds
        for k in self.num_neighbors:
            hop = _hop(graph, frontier, k, self.replace, generator)
            cand = hop.nbr if tree is None else frontier_tree[hop.owner] * n + hop.nbr
            local, new = node_set.add(cand, count)
            rows.append(local)
            cols.append(frontier_start + hop.owner)
            e_ids.append(hop.e_id)
            num_sampled_edges.append(hop.owner.numel())
            frontier, frontier_tree = (new, None) if tree is None else (new % n, new // n)
            nodes.append(frontier)
            trees.append(frontier_tree)
            frontier_start, count = count, count + new.numel()
            num_sampled_nodes.append(new.numel())

        n_id = torch.cat(nodes)
        batch = torch.cat(trees) if self.disjoint else None
        empty = torch.empty(0, dtype=torch.int64, device=device)
        row, col, e_id = (torch.cat(t) if t else empty for t in (rows, cols, e_ids))
        if self.subgraph_type == "bidirectional":
            row, col, e_id = _coalesce(torch.cat([row, col]), torch.cat([col, row]), torch.cat([e_id, e_id]),
                                       n_id.numel())
        elif self.subgraph_type == "induced" and self.disjoint:
            row, col, e_id = _induced_edges(graph, n_id, batch)
        elif self.subgraph_type == "induced":
            # induced_edges needs distinct nodes: extract on the first row of each node (a repeated seed's
            # later rows get no edges), then map back to rows of n_id (increasing, so the order is kept)
            first = (node_set.find(n_id) == torch.arange(n_id.numel(), device=device)).nonzero().view(-1)
            row, col, e_id = _induced_edges(graph, n_id[first])
            row, col = first[row], first[col]
        return NeighborSample(
            n_id=n_id,
            edge_index=torch.stack([row, col]),
            e_id=e_id,
            batch_size=num_seeds,
            num_sampled_nodes=tuple(num_sampled_nodes),
            num_sampled_edges=tuple(num_sampled_edges) if self.subgraph_type == "directional" else None,
            batch=batch,
        )
