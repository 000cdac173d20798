"""Induced-subgraph extraction against a brute-force scan of the edge list."""

from __future__ import annotations

import pytest
import torch

import graphfuse
from cases import make_graph_case
from graphfuse.samplers import induced_edges, induced_subgraph
from graphfuse.samplers.subgraph import expand_ranges, owned_adjacency

CASES = ["no_edges", "isolated", "single_node", "hub", "duplicates", "unsorted"]


def brute_force(graph: graphfuse.Graph, nodes: torch.Tensor):
    """(src, dst, e_id) of the induced edges, local id = rank in the sorted node set, CSR order."""
    n_id = sorted(set(nodes.tolist()))
    local = {v: k for k, v in enumerate(n_id)}
    kept = [(local[s], local[d], e) for e, (s, d) in enumerate(graph.edge_index.t().tolist())
            if s in local and d in local]
    kept.sort(key=lambda t: (t[1], t[2]))
    return n_id, kept


@pytest.mark.parametrize("case", CASES)
def test_induced_subgraph_matches_brute_force(case, device):
    graph = make_graph_case(case, device)
    gen = torch.Generator().manual_seed(3)
    for size in (0, 1, max(graph.num_nodes // 3, 1), graph.num_nodes):
        nodes = torch.randint(0, graph.num_nodes, (size,), generator=gen).to(device)
        sub = induced_subgraph(graph, nodes)
        n_id, kept = brute_force(graph, nodes.cpu())
        assert sub.n_id.tolist() == n_id
        got = list(zip(sub.edge_index[0].tolist(), sub.edge_index[1].tolist(), sub.e_id.tolist()))
        assert got == kept
        assert sub.num_nodes == len(n_id) and sub.num_edges == len(kept)


def test_relabelling_by_rank_keeps_direction():
    #   0 → 1 → 2 → 3 → 0, plus 2 → 0 and a self-loop on 3
    graph = graphfuse.Graph(torch.tensor([[0, 1, 2, 3, 2, 3], [1, 2, 3, 0, 0, 3]]), num_nodes=4)
    sub = induced_subgraph(graph, torch.tensor([3, 0, 2, 3]))
    assert sub.n_id.tolist() == [0, 2, 3]
    # local ids: 0→0, 2→1, 3→2; edges sorted by target: 3→0 (e3), 2→0 (e4), 2→3 (e2), 3→3 (e5)
    assert sub.edge_index.tolist() == [[2, 1, 1, 2], [0, 0, 2, 2]]
    assert sub.e_id.tolist() == [3, 4, 2, 5]


def test_grouped_extraction_keeps_groups_apart(device):
    graph = make_graph_case("unsorted", device, seed=5)
    gen = torch.Generator().manual_seed(0)
    sets = [torch.randperm(graph.num_nodes, generator=gen)[:k] for k in (5, 20, 35)]
    nodes = torch.cat(sets).to(device)
    group = torch.cat([torch.full((len(s),), g) for g, s in enumerate(sets)]).to(device)
    src, dst, e_id = induced_edges(graph, nodes, group)
    offsets = [0, 5, 25]
    expected = []
    for g, s in enumerate(sets):
        local = {v: offsets[g] + k for k, v in enumerate(s.tolist())}
        for e, (a, b) in enumerate(graph.edge_index.t().tolist()):
            if a in local and b in local:
                expected.append((local[a], local[b], e))
    got = sorted(zip(src.tolist(), dst.tolist(), e_id.tolist()))
    assert got == sorted(expected)
    assert dst.tolist() == sorted(dst.tolist())  # ordered by local target


def test_owned_adjacency_covers_each_edge_once():
    graph = make_graph_case("hub")
    adjacency = owned_adjacency(graph)
    assert sorted(adjacency.e_id.tolist()) == list(range(graph.num_edges))
    degree = graph.in_degree + graph.out_degree
    owner, _ = expand_ranges(torch.zeros(graph.num_nodes, dtype=torch.long), adjacency.ptr.diff())
    src, dst = graph.edge_index[:, adjacency.e_id]
    assert torch.equal(torch.where(adjacency.owner_is_dst, dst, src), owner)
    assert torch.equal(torch.where(adjacency.owner_is_dst, src, dst), adjacency.other)
    assert bool((degree[owner] <= degree[adjacency.other]).all())
    # the hub (node 0, ~300 in-edges) owns only its self-loop: no node has a higher degree
    assert adjacency.other[adjacency.ptr[0]:adjacency.ptr[1]].tolist() == [0]


def test_errors_name_the_argument():
    graph = make_graph_case("unsorted")
    with pytest.raises(ValueError, match=r"induced_subgraph: nodes must be node ids in \[0, "):
        induced_subgraph(graph, torch.tensor([0, 50]))
    with pytest.raises(ValueError, match="square"):
        induced_subgraph(make_graph_case("bipartite"), torch.tensor([0]))
    # float ids were truncated by .long() (a silent wrong subgraph); a list failed with an AttributeError
    for bad in (torch.tensor([0.5, 1.7]), [0, 1]):
        with pytest.raises(TypeError, match="induced_subgraph: nodes must be an int64 or int32 tensor"):
            induced_subgraph(graph, bad)
    assert torch.equal(induced_subgraph(graph, torch.tensor([3, 1], dtype=torch.int32)).n_id, torch.tensor([1, 3]))


def test_induced_edges_checks_its_arguments():
    """induced_edges checked nothing: a negative group kept edges between groups, a repeated node or an
    out-of-range id gave wrong edges or an IndexError deep in torch, a 2-D nodes tensor failed in torch."""
    graph = make_graph_case("unsorted")
    nodes = torch.tensor([0, 1, 2])
    with pytest.raises(ValueError, match="induced_edges: group ids must be >= 0"):
        induced_edges(graph, nodes, torch.tensor([0, -1, 0]))
    with pytest.raises(ValueError, match="induced_edges: nodes must be distinct"):
        induced_edges(graph, torch.tensor([0, 1, 0]))
    with pytest.raises(ValueError, match="induced_edges: group must have the shape and device of nodes"):
        induced_edges(graph, nodes, torch.tensor([0, 1]))
    with pytest.raises(TypeError, match="induced_edges: group must be None or an int64/int32 tensor"):
        induced_edges(graph, nodes, torch.tensor([0.0, 1.0, 0.0]))
    with pytest.raises(ValueError, match=r"induced_edges: nodes must be node ids in \[0, "):
        induced_edges(graph, torch.tensor([0, 99]))
    with pytest.raises(ValueError, match="induced_edges: nodes must be a 1-D tensor"):
        induced_edges(graph, nodes.view(1, 3))
    with pytest.raises(TypeError, match="induced_edges: ordered must be a bool"):
        induced_edges(graph, nodes, ordered="yes")
    # the same node in two groups is fine
    src, dst, e_id = induced_edges(graph, torch.tensor([0, 1, 0, 1]), torch.tensor([0, 0, 1, 1]))
    assert src.numel() == dst.numel() == e_id.numel()
