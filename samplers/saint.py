"""GraphSAINT subgraph samplers of Zeng et al., "GraphSAINT: Graph Sampling Based Inductive Learning Method"
(ICLR 2020): node, edge and random-walk samplers drawing node-induced subgraphs on the graph's device.

Each sampler is a frozen dataclass of its parameters. ``sampler(graph, generator)`` draws one subgraph
(a :class:`~graphfuse.samplers.subgraph.Subgraph`: sorted ``n_id``, local ``edge_index``, ``e_id``);
``sampler.draw(graph, num_samples, generator)`` draws the raw node multisets of several subgraphs at once
(what the normalisation pre-sampling uses). Semantics follow PyG's ``GraphSAINT*Sampler``:

- node: ``budget`` edges uniformly with replacement, keep their sources (P(v per draw) = out_deg(v) / E);
- edge: ``budget`` edges with replacement, P(e = u → v) ∝ 1/out_deg(u) + 1/in_deg(v), keep both endpoints.
  These are the paper's weights; PyG's ``GraphSAINTEdgeSampler`` uses in_deg(u) + out_deg(v) (∝ degree)
  and draws ``batch_size`` distinct edges, so a budget here gives a smaller subgraph than PyG's (300 draws
  over 600 edges keep ~236 distinct ones); the normalisation is pre-sampled with the same draws;
- random walk: ``roots`` roots uniform over all nodes, ``walk_length`` steps each to a uniformly chosen
  out-neighbour (CSC by source); a node without out-edges stays put. Every visited node is kept.

The node set is the sorted set of the drawn nodes; the subgraph is induced by it.

Shapes:
    draw → (num_samples, W) int64 node ids with W = budget (node), 2·budget (edge), roots·(walk_length + 1)
    (random walk); duplicates allowed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from graphfuse.checks import is_int
from graphfuse.graph import Graph
from graphfuse.samplers.subgraph import Subgraph, _check_square, _induced_edges, check_node_ids


def check_generator(generator: torch.Generator | None, device: torch.device, name: str) -> None:
    """Raise unless ``generator`` is None or a ``torch.Generator`` on ``device`` (torch needs the generator beside
    the tensor)."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"{name}: generator must be None or a torch.Generator; got {type(generator).__name__}")
    if generator is not None and torch.device(generator.device).type != device.type:
        raise ValueError(f"{name}: generator is on {generator.device} but the graph is on {device}; create it "
                         f"with torch.Generator(device={str(device)!r})")


def check_sampler(name: str, sampler: object, *, subgraphs: bool = False) -> None:
    """Raise TypeError unless ``sampler`` is a GraphSAINT sampler object: a dataclass instance (its fields key the
    normalisation cache) with a str ``name`` and a ``draw`` method, and, with ``subgraphs``, callable for one
    subgraph (a sampler class, not yet built, is refused)."""
    if (isinstance(sampler, type) or not callable(getattr(sampler, "draw", None))
            or not isinstance(getattr(sampler, "name", None), str) or not dataclasses.is_dataclass(sampler)
            or (subgraphs and not callable(sampler))):
        need = "a dataclass with a str name, draw() and, to draw subgraphs, __call__" if subgraphs else \
            "a dataclass with a str name and draw()"
        raise TypeError(f"{name}: sampler must be a GraphSAINT sampler instance ({need}), e.g. "
                        f"SaintNodeSampler(budget=1000); got {sampler!r}")


def _check_positive(name: str, field: str, value: object, minimum: int = 1) -> int:
    """``value`` as an int (a NumPy integer too); ValueError unless it is an int ≥ ``minimum``."""
    if not is_int(value) or value < minimum:
        raise ValueError(f"{name}: {field} must be an int ≥ {minimum}; got {value!r}")
    return int(value)


def _int_field(sampler: object, field: str, minimum: int = 1) -> None:
    """Check a frozen sampler's int field and store it as an int (a NumPy value would change its repr)."""
    value = _check_positive(type(sampler).__name__, field, getattr(sampler, field), minimum)
    object.__setattr__(sampler, field, value)


def _check_edges(graph: Graph, name: str) -> None:
    _check_square(graph, name)
    if graph.num_edges == 0:
        raise ValueError(f"{name}: the graph has no edges to sample from")


def random_walk(graph: Graph, start: Tensor, walk_length: int, generator: torch.Generator | None = None) -> Tensor:
    """Uniform random walks along out-edges (``j → i`` moves from ``j`` to ``i``), one step per gather.

    A node without out-edges stays where it is for the rest of the walk.

    Args:
        graph: a square graph; its CSC (by source) is built and cached on first use.
        start: start node of each walk.
        walk_length: number of steps.
        generator: random generator on the graph's device.

    Returns:
        The visited nodes, ``start`` in column 0.

    Shapes:
        start: (B,) int64 → (B, walk_length + 1) int64.
    """
    _check_square(graph, "random_walk")
    check_generator(generator, graph.device, "random_walk")
    walk_length = _check_positive("random_walk", "walk_length", walk_length, minimum=0)
    return _walk(graph, check_node_ids("random_walk", "start", start, graph), walk_length, generator)


def _walk(graph: Graph, start: Tensor, walk_length: int, generator: torch.Generator | None) -> Tensor:
    """:func:`random_walk` on checked arguments (``start`` int64 ids on the graph's device)."""
    colptr, targets, _, _ = graph.csc
    degree = graph.out_degree
    path = [start]
    current = start
    for _ in range(walk_length):
        if graph.num_edges == 0:
            path.append(current)
            continue
        deg = degree[current]
        draw = torch.rand(current.shape, dtype=torch.float64, device=graph.device, generator=generator)
        offset = torch.minimum((draw * deg).long(), (deg - 1).clamp_(min=0))
        step = targets[(colptr[current] + offset).clamp_(max=graph.num_edges - 1)]
        current = torch.where(deg > 0, step, current)
        path.append(current)
    return torch.stack(path, dim=1)


def _endpoints(graph: Graph, nodes: Tensor) -> Tensor:
    """(N,) bool: which nodes occur in ``nodes``; one pass over the edge list, no CSR/CSC (the node sampler, which
    draws from the edge list, never builds them)."""
    return torch.zeros(graph.num_nodes, dtype=torch.bool, device=graph.device).index_fill_(0, nodes, True)


class _SaintSampler:
    """Shared by the three samplers: one subgraph from ``draw``."""

    name: ClassVar[str]

    def draw(self, graph: Graph, num_samples: int, generator: torch.Generator | None = None) -> Tensor:
        raise NotImplementedError

    def drawable(self, graph: Graph) -> Tensor:
        """(N,) bool: the nodes this sampler can draw from ``graph`` (the others have probability 0)."""
        return torch.ones(graph.num_nodes, dtype=torch.bool, device=graph.device)

    def __call__(self, graph: Graph, generator: torch.Generator | None = None) -> Subgraph:
        """Draw one node-induced subgraph (node ids sorted; local id = rank)."""
        n_id = torch.unique(self.draw(graph, 1, generator))
        src, dst, e_id = _induced_edges(graph, n_id)
        return Subgraph(n_id=n_id, edge_index=torch.stack([src, dst]), e_id=e_id)


@dataclass(frozen=True)
class SaintNodeSampler(_SaintSampler):
    """GraphSAINT node sampler: the sources of ``budget`` uniformly drawn edges (P ∝ out-degree).

    Args:
        budget: edges drawn per subgraph (PyG's ``batch_size``); the subgraph has at most ``budget`` nodes.

    Example:
        >>> sub = SaintNodeSampler(budget=6000)(graph, torch.Generator().manual_seed(0))
    """

    budget: int
    name: ClassVar[str] = "saint_node"

    def __post_init__(self) -> None:
        _int_field(self, "budget")

    def drawable(self, graph: Graph) -> Tensor:
        """Nodes with an out-edge: only edge sources are kept."""
        return _endpoints(graph, graph.edge_index[0])

    def draw(self, graph: Graph, num_samples: int, generator: torch.Generator | None = None) -> Tensor:
        """Shapes: → (num_samples, budget) source nodes of the drawn edges."""
        num_samples = _check_positive("SaintNodeSampler", "num_samples", num_samples, minimum=0)
        _check_edges(graph, "SaintNodeSampler")
        check_generator(generator, graph.device, "SaintNodeSampler")
        edges = torch.randint(0, graph.num_edges, (num_samples, self.budget), device=graph.device,
                              generator=generator)
        return graph.edge_index[0][edges]


def edge_sampling_cdf(graph: Graph) -> Tensor:
    """Cumulative GraphSAINT edge weights ``1/out_deg(src) + 1/in_deg(dst)`` in COO order (float64, cached).

    Shapes:
        → (E,) float64, non-decreasing; the last entry is the total weight.
    """

    def build() -> Tensor:
        src, dst = graph.edge_index
        weight = graph.out_degree[src].double().reciprocal() + graph.in_degree[dst].double().reciprocal()
        return torch.cumsum(weight, 0)

    return graph.cached("saint_edge_cdf", build)


@dataclass(frozen=True)
class SaintEdgeSampler(_SaintSampler):
    """GraphSAINT edge sampler: ``budget`` edges drawn with replacement, P(u → v) ∝ 1/out_deg(u) + 1/in_deg(v).

    Draws are an inverse-CDF lookup (``searchsorted``) in the cached cumulative weights: O(E) memory once,
    O(budget · log E) per subgraph. On an undirected graph (both directions stored) the weights are the
    paper's 1/deg(u) + 1/deg(v); PyG's sampler uses deg(u) + deg(v) instead.

    Args:
        budget: edges drawn per subgraph; both endpoints of each are kept (≤ 2·budget nodes).
    """

    budget: int
    name: ClassVar[str] = "saint_edge"

    def __post_init__(self) -> None:
        _int_field(self, "budget")

    def drawable(self, graph: Graph) -> Tensor:
        """Nodes with an edge (either end): only edge endpoints are kept."""
        return _endpoints(graph, graph.edge_index.view(-1))

    def draw(self, graph: Graph, num_samples: int, generator: torch.Generator | None = None) -> Tensor:
        """Shapes: → (num_samples, 2·budget): sources of the drawn edges, then their targets."""
        num_samples = _check_positive("SaintEdgeSampler", "num_samples", num_samples, minimum=0)
        _check_edges(graph, "SaintEdgeSampler")
        check_generator(generator, graph.device, "SaintEdgeSampler")
        cdf = edge_sampling_cdf(graph)
        draw = torch.rand(num_samples, self.budget, dtype=torch.float64, device=graph.device,
                          generator=generator)
        edges = torch.searchsorted(cdf, draw * cdf[-1], right=True).clamp_(max=graph.num_edges - 1)
        return torch.cat([graph.edge_index[0][edges], graph.edge_index[1][edges]], dim=1)


@dataclass(frozen=True)
class SaintRandomWalkSampler(_SaintSampler):
    """GraphSAINT random-walk sampler: every node visited by ``roots`` uniform walks of ``walk_length`` steps.

    Args:
        roots: walks per subgraph (PyG's ``batch_size``), started at nodes drawn uniformly with replacement.
        walk_length: steps per walk (0 keeps the roots only).
    """

    roots: int
    walk_length: int
    name: ClassVar[str] = "saint_rw"

    def __post_init__(self) -> None:
        _int_field(self, "roots")
        _int_field(self, "walk_length", minimum=0)

    def draw(self, graph: Graph, num_samples: int, generator: torch.Generator | None = None) -> Tensor:
        """Shapes: → (num_samples, roots · (walk_length + 1)) visited nodes, walk by walk."""
        num_samples = _check_positive("SaintRandomWalkSampler", "num_samples", num_samples, minimum=0)
        _check_square(graph, "SaintRandomWalkSampler")
        if graph.num_nodes == 0:
            raise ValueError("SaintRandomWalkSampler: the graph has no nodes")
        check_generator(generator, graph.device, "SaintRandomWalkSampler")
        start = torch.randint(0, graph.num_nodes, (num_samples * self.roots,), device=graph.device,
                              generator=generator)
        return _walk(graph, start, self.walk_length, generator).view(num_samples, self.roots * (self.walk_length + 1))


SAINT_SAMPLERS: dict[str, type[_SaintSampler]] = {
    cls.name: cls for cls in (SaintNodeSampler, SaintEdgeSampler, SaintRandomWalkSampler)
}
