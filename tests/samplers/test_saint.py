"""GraphSAINT samplers: exact semantics on hand-built graphs and reproducibility by seed."""

from __future__ import annotations

import itertools

import pytest
import torch

import graphfuse
from cases import make_graph_case
from graphfuse.samplers import (
    SAINT_SAMPLERS,
    SaintEdgeSampler,
    SaintLoader,
    SaintNodeSampler,
    SaintRandomWalkSampler,
    compute_saint_norm,
    random_walk,
)

SAMPLERS = [SaintNodeSampler(budget=8), SaintEdgeSampler(budget=5), SaintRandomWalkSampler(roots=4, walk_length=3)]


def chain_with_sink() -> graphfuse.Graph:
    """0 → 1 → 2 → 3 (3 has no out-edges), 4 → 0, and 5 isolated."""
    return graphfuse.Graph(torch.tensor([[0, 1, 2, 4], [1, 2, 3, 0]]), num_nodes=6)


def check_induced(graph: graphfuse.Graph, sub) -> None:
    """n_id sorted and distinct; every edge between kept nodes present once, relabelled by rank, CSR order."""
    n_id = sub.n_id.tolist()
    assert n_id == sorted(set(n_id))
    local = {v: k for k, v in enumerate(n_id)}
    expected = sorted((local[s], local[d], e) for e, (s, d) in enumerate(graph.edge_index.t().tolist())
                      if s in local and d in local)
    got = list(zip(sub.edge_index[0].tolist(), sub.edge_index[1].tolist(), sub.e_id.tolist()))
    assert sorted(got) == expected
    assert got == sorted(got, key=lambda t: (t[1], t[2]))


@pytest.mark.parametrize("sampler", SAMPLERS, ids=lambda s: s.name)
@pytest.mark.parametrize("case", ["isolated", "hub", "duplicates", "unsorted"])
def test_subgraph_is_node_induced(sampler, case, device):
    graph = make_graph_case(case, device)
    gen = torch.Generator(device=device).manual_seed(0)
    for _ in range(5):
        check_induced(graph, sampler(graph, gen))


def test_node_sampler_keeps_sources_only():
    graph = chain_with_sink()
    gen = torch.Generator().manual_seed(1)
    seen = set()
    for _ in range(50):
        seen |= set(SaintNodeSampler(budget=3)(graph, gen).n_id.tolist())
    assert seen == {0, 1, 2, 4}  # 3 (no out-edges) and 5 (isolated) are never a source


def test_edge_sampler_keeps_both_endpoints_of_drawn_edges():
    graph = chain_with_sink()
    raw = SaintEdgeSampler(budget=6).draw(graph, 20, torch.Generator().manual_seed(2))
    assert raw.shape == (20, 12)
    edges = {tuple(e) for e in graph.edge_index.t().tolist()}
    for row in raw.tolist():
        assert all((s, d) in edges for s, d in zip(row[:6], row[6:]))


def test_random_walk_follows_out_edges_and_stays_on_sinks():
    graph = chain_with_sink()
    start = torch.tensor([0, 4, 3, 5, 2])
    walks = random_walk(graph, start, 4, torch.Generator().manual_seed(0))
    assert walks.tolist() == [[0, 1, 2, 3, 3], [4, 0, 1, 2, 3], [3, 3, 3, 3, 3], [5, 5, 5, 5, 5], [2, 3, 3, 3, 3]]


def test_random_walk_steps_are_edges():
    graph = make_graph_case("unsorted")
    walks = random_walk(graph, torch.arange(50), 6, torch.Generator().manual_seed(0))
    edges = {tuple(e) for e in graph.edge_index.t().tolist()}
    sinks = set((graph.out_degree == 0).nonzero().view(-1).tolist())
    for walk in walks.tolist():
        for a, b in itertools.pairwise(walk):
            assert (a, b) in edges or (a == b and a in sinks)


def test_random_walk_sampler_node_set_is_the_visited_nodes():
    graph = chain_with_sink()
    sampler = SaintRandomWalkSampler(roots=3, walk_length=2)
    raw = sampler.draw(graph, 1, torch.Generator().manual_seed(7))
    sub = sampler(graph, torch.Generator().manual_seed(7))
    assert raw.shape == (1, 9)
    assert sub.n_id.tolist() == sorted(set(raw.view(-1).tolist()))


@pytest.mark.parametrize("sampler", SAMPLERS, ids=lambda s: s.name)
def test_same_seed_same_subgraphs(sampler, device):
    graph = make_graph_case("hub", device)
    runs = []
    for _ in range(2):
        gen = torch.Generator(device=device).manual_seed(123)
        runs.append([sampler(graph, gen) for _ in range(3)])
    for a, b in zip(*runs):
        assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
        assert torch.equal(a.e_id, b.e_id)
    assert not all(torch.equal(runs[0][0].n_id, s.n_id) for s in runs[0][1:])


def test_registry_and_parameter_checks():
    assert set(SAINT_SAMPLERS) == {"saint_node", "saint_edge", "saint_rw"}
    assert SAINT_SAMPLERS["saint_rw"](roots=2, walk_length=1) == SaintRandomWalkSampler(2, 1)
    with pytest.raises(ValueError, match="budget"):
        SaintNodeSampler(budget=0)
    with pytest.raises(ValueError, match="walk_length"):
        SaintRandomWalkSampler(roots=1, walk_length=-1)
    with pytest.raises(ValueError, match="no edges"):
        SaintNodeSampler(budget=1)(make_graph_case("no_edges"))
    with pytest.raises(ValueError, match="square"):
        SaintEdgeSampler(budget=1)(make_graph_case("bipartite"))


def test_random_walk_names_bad_arguments():
    # a negative walk_length returned the starts alone, an out-of-range start failed with an IndexError
    graph = make_graph_case("unsorted")
    for length in (-1, 1.5):
        with pytest.raises(ValueError, match="random_walk: walk_length must be an int ≥ 0"):
            random_walk(graph, torch.tensor([0]), length)
    with pytest.raises(ValueError, match=rf"random_walk: start must be node ids in \[0, {graph.num_nodes}\)"):
        random_walk(graph, torch.tensor([graph.num_nodes]), 2)
    with pytest.raises(TypeError, match="random_walk: start must be an int64 or int32 tensor"):
        random_walk(graph, torch.tensor([0.0]), 2)
    with pytest.raises(ValueError, match="square"):
        random_walk(make_graph_case("bipartite"), torch.tensor([0]), 1)


@pytest.mark.gpu
def test_generator_on_another_device_is_refused():
    graph = make_graph_case("unsorted")
    with pytest.raises(ValueError, match="generator is on cuda"):
        SaintNodeSampler(budget=1)(graph, torch.Generator(device="cuda"))


def test_every_sampler_draws_zero_subgraphs_as_an_empty_tensor():
    """The random-walk sampler's view(0, -1) raised where the node and edge samplers returned (0, W)."""
    graph = make_graph_case("hub")
    for sampler, width in ((SaintNodeSampler(5), 5), (SaintEdgeSampler(5), 10), (SaintRandomWalkSampler(3, 2), 9)):
        assert sampler.draw(graph, 0, torch.Generator().manual_seed(0)).shape == (0, width)


def test_walk_length_zero_keeps_the_roots_only():
    """walk_length=0 is allowed (the docstring: "0 keeps the roots only"): every subgraph is its roots, drawn
    uniformly over all nodes, an edgeless sink and an isolated node included."""
    graph = chain_with_sink()
    sampler = SaintRandomWalkSampler(roots=3, walk_length=0)
    raw = sampler.draw(graph, 400, torch.Generator().manual_seed(0))
    assert raw.shape == (400, 3)
    assert set(raw.view(-1).tolist()) == set(range(6))  # 1200 uniform roots reach every one of the 6 nodes
    sub = sampler(graph, torch.Generator().manual_seed(1))
    assert 1 <= sub.num_nodes <= 3
    for batch in SaintLoader(graph, sampler, num_steps=5, sample_coverage=2, seed=0):
        assert batch.num_nodes <= 3 and bool((batch.node_norm > 0).all())
    sn = compute_saint_norm(graph, sampler, sample_coverage=4, seed=0)
    assert int(sn.node_count.sum()) >= 6 * 4
