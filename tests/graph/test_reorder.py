"""Cluster-based node order: communities come out contiguous, the renumbered graph is the same graph, and
aggregation on it gives the same result up to the renumbering."""

from __future__ import annotations

import pytest
import torch

import graphfuse
from cases import make_graph_case
from graphfuse.graph import add_remaining_self_loops, cluster_labels, cluster_order, permute_nodes


def interleaved_cliques(size: int = 6, bridges: int = 1) -> graphfuse.Graph:
    """Two cliques whose node ids alternate (0, 2, 4, … and 1, 3, 5, …) joined by ``bridges`` edges."""
    parts = [list(range(0, 2 * size, 2)), list(range(1, 2 * size, 2))]
    edges = [(i, j) for part in parts for i in part for j in part if i != j]
    edges += [(parts[0][k], parts[1][k]) for k in range(bridges)]
    return graphfuse.Graph(torch.tensor(edges).t(), num_nodes=2 * size)


def test_communities_come_out_contiguous():
    g = interleaved_cliques()
    labels = cluster_labels(g)
    assert len(set(labels[0::2].tolist())) == 1 and len(set(labels[1::2].tolist())) == 1
    assert labels[0] != labels[1]
    order = cluster_order(g)
    assert sorted(order.tolist()) == list(range(12))
    assert set(order[:6].tolist()) in ({0, 2, 4, 6, 8, 10}, {1, 3, 5, 7, 9, 11})
    assert cluster_order(g) is order  # cached on the graph


def test_labels_are_deterministic_and_isolated_nodes_keep_their_own():
    g = make_graph_case("isolated")
    assert torch.equal(cluster_labels(g), cluster_labels(g))
    isolated = g.in_degree.eq(0) & g.out_degree.eq(0)
    assert torch.equal(cluster_labels(g)[isolated], torch.arange(g.num_nodes)[isolated])
    assert torch.equal(cluster_labels(g, iterations=0), torch.arange(g.num_nodes))


@pytest.mark.parametrize("case", ["hub", "duplicates", "unsorted", "isolated", "no_edges"])
@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
@pytest.mark.parametrize("weighted", [False, True])
def test_aggregation_on_the_renumbered_graph_matches_up_to_the_order(case, reduce, weighted):
    """On a random renumbering (cluster_order is the identity on most of these cases) of a weighted or unweighted
    graph, aggregation gives the original result in the new order."""
    g = make_graph_case(case)
    gen = torch.Generator().manual_seed(0)
    if weighted:
        g = graphfuse.Graph(g.edge_index, num_nodes=g.num_nodes,
                            edge_weight=torch.rand(g.num_edges, generator=gen, dtype=torch.float64) + 0.5)
    order = torch.randperm(g.num_nodes, generator=gen)
    p = permute_nodes(g, order)
    x = torch.randn(g.num_nodes, 5, generator=gen, dtype=torch.float64)
    out = graphfuse.aggregate(p, x[order], p.edge_weight, reduce=reduce)
    torch.testing.assert_close(out, graphfuse.aggregate(g, x, g.edge_weight, reduce=reduce)[order])


def test_cluster_order_is_cached_per_iteration_count():
    g = interleaved_cliques()
    assert torch.equal(cluster_order(g, 0), torch.arange(g.num_nodes))  # no iteration: every node its own label
    assert not torch.equal(cluster_order(g), torch.arange(g.num_nodes))
    assert cluster_order(g) is cluster_order(g) and cluster_order(g, 0) is cluster_order(g, 0)


def test_bad_arguments():
    g = interleaved_cliques()
    with pytest.raises(ValueError, match="permute_nodes: order must be a permutation"):
        permute_nodes(g, torch.zeros(12, dtype=torch.int64))
    for bad in (12, -1):  # out of range (-1 would have wrapped around to node 11)
        order = torch.arange(12)
        order[3] = bad
        with pytest.raises(ValueError, match=r"permute_nodes: order must be a permutation of \[0, N=12\)"):
            permute_nodes(g, order)
    with pytest.raises(ValueError, match=r"permute_nodes: order must have shape \(12,\); got \(11,\)"):
        permute_nodes(g, torch.arange(11))
    with pytest.raises(TypeError, match="permute_nodes: order must be an int64 or int32 tensor; got torch.float32"):
        permute_nodes(g, torch.arange(12.0))
    flipped = torch.arange(11, -1, -1)
    assert torch.equal(permute_nodes(g, flipped.int()).edge_index, permute_nodes(g, flipped).edge_index)
    with pytest.raises(ValueError, match="cluster_labels: iterations must be an int"):
        cluster_labels(g, iterations=-1)
    cluster_order(g, 1)  # cached under 1: True and 1.0 had hit that entry and passed
    for bad in (True, 1.0):
        with pytest.raises(ValueError, match="cluster_order: iterations must be an int"):
            cluster_order(g, bad)
    with pytest.raises(ValueError, match="needs a square graph"):
        cluster_order(make_graph_case("bipartite"))
    with pytest.raises(TypeError, match="graph must be a graphfuse.Graph"):
        cluster_labels(torch.zeros(2, 3))


def test_two_colourable_structures_do_not_oscillate():
    """One undirected edge: updating both endpoints at once would swap their labels every pass."""
    g = graphfuse.Graph(torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    labels = cluster_labels(g)
    assert labels[0] == labels[1]


def test_a_quiet_half_pass_does_not_stop_propagation():
    """Even nodes isolated, odd nodes a triangle: the first (even) pass changes nothing, the odd half still must run."""
    g = graphfuse.Graph(torch.tensor([[1, 3, 3, 5, 5, 1], [3, 1, 5, 3, 1, 5]]), num_nodes=6)
    labels = cluster_labels(g)
    assert labels[1] == labels[3] == labels[5]
    assert labels[[0, 2, 4]].tolist() == [0, 2, 4]


@pytest.mark.parametrize("case", ["unsorted", "hub", "duplicates"])
def test_self_loops_do_not_vote(case):
    """Labels come from a node's neighbours; a self-loop (every GCN- or GAT-processed graph has one per node)
    is no neighbour: with or without them the communities are the same (mutant R02 let a node's self-loop vote
    for its own label)."""
    g = make_graph_case(case)
    looped = add_remaining_self_loops(g)
    assert torch.equal(cluster_labels(looped), cluster_labels(g))
