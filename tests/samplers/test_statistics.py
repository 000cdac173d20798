"""Sampling statistics against exact probabilities, unbiasedness of the normalised estimates, and CPU vs CUDA.

Every bound is 5 standard deviations derived from the number of draws (and, for normalised estimates, from
the pre-sampling counts behind the coefficients), so a correct sampler fails with probability < 1e-5 per
checked quantity while a wrong probability or convention is far outside.
"""

from __future__ import annotations

import pytest
import torch

import graphfuse
from graphfuse.samplers import (
    NeighborSampler,
    SaintEdgeSampler,
    SaintNodeSampler,
    SaintRandomWalkSampler,
    compute_saint_norm,
    count_saint_samples,
    graph_fingerprint,
    induced_edges,
    induced_subgraph,
    sample_neighbors,
)

SIGMAS = 5.0


def skewed_graph(device="cpu") -> graphfuse.Graph:
    """17 nodes: a hub (0) linked both ways to 1..9, a directed ring 10 → 11 → ... → 14 → 10, chords, a sink (15,
    in-edges only) and an isolated node (16). Inclusion probabilities differ widely between nodes."""
    edges = [(0, v) for v in range(1, 10)] + [(v, 0) for v in range(1, 10)]
    edges += [(v, v + 1) for v in range(10, 14)] + [(14, 10)]
    edges += [(1, 2), (2, 1), (3, 10), (10, 3), (5, 12), (12, 5), (9, 15), (13, 15), (7, 7), (4, 6)]
    return graphfuse.Graph(torch.tensor(edges).t(), num_nodes=17).to(device)


def binomial_bound(p: torch.Tensor, trials) -> torch.Tensor:
    return SIGMAS * torch.sqrt(p * (1 - p) / trials)


def node_sampler_probability(graph, budget):
    q = graph.out_degree.cpu().double() / graph.num_edges
    return 1 - (1 - q) ** budget


def edge_sampler_probability(graph, budget):
    src, dst = graph.edge_index.cpu()
    w = 1 / graph.out_degree.cpu()[src].double() + 1 / graph.in_degree.cpu()[dst].double()
    pi = w / w.sum()
    q = torch.zeros(graph.num_nodes, dtype=torch.float64)
    q.index_add_(0, src, pi)
    q.index_add_(0, dst, torch.where(src == dst, 0.0, pi))
    return 1 - (1 - q) ** budget


def random_walk_probability(graph, roots, walk_length):
    """1 − P(no walk visits v): a walk avoids v when it neither starts at v nor steps onto it."""
    n = graph.num_nodes
    src, dst = graph.edge_index.cpu()
    P = torch.zeros(n, n, dtype=torch.float64)
    P.index_put_((src, dst), torch.ones(src.numel(), dtype=torch.float64), accumulate=True)
    deg = P.sum(1, keepdim=True)
    P = torch.where(deg > 0, P / deg.clamp(min=1), torch.eye(n, dtype=torch.float64))
    avoid = torch.empty(n, dtype=torch.float64)
    for v in range(n):
        Q = P.clone()
        Q[:, v] = 0
        start = torch.full((n,), 1 / n, dtype=torch.float64)
        start[v] = 0
        avoid[v] = (start @ torch.linalg.matrix_power(Q, walk_length)).sum()
    return 1 - avoid ** roots


def inclusion_frequency(sampler, graph, trials, generator):
    count = torch.zeros(graph.num_nodes, dtype=torch.float64, device=graph.device)
    for _ in range(trials):
        count[sampler(graph, generator).n_id] += 1
    return count.cpu() / trials


CASES = {
    "saint_node": (SaintNodeSampler(budget=6), lambda g: node_sampler_probability(g, 6)),
    "saint_edge": (SaintEdgeSampler(budget=3), lambda g: edge_sampler_probability(g, 3)),
    "saint_rw": (SaintRandomWalkSampler(roots=2, walk_length=3), lambda g: random_walk_probability(g, 2, 3)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_inclusion_frequency_matches_exact_probability(name):
    graph = skewed_graph()
    sampler, probability = CASES[name]
    trials = 2000
    p = probability(graph)
    freq = inclusion_frequency(sampler, graph, trials, torch.Generator().manual_seed(0))
    bound = binomial_bound(p, trials) + 1e-12
    assert bool(((freq - p).abs() <= bound).all()), ((freq - p).abs() / bound).max()
    assert p.min() < 0.2 and p.max() > 0.6 or name == "saint_node"  # the graph does discriminate


def batched_subgraphs(graph, sampler, trials, generator):
    """``trials`` subgraphs at once: (group, node) of their nodes and (group, src, dst, e_id) of their edges."""
    n = graph.num_nodes
    raw = sampler.draw(graph, trials, generator)
    group = torch.arange(trials).view(-1, 1).expand_as(raw)
    keys = torch.unique(group * n + raw)
    node_group, nodes = keys // n, keys % n
    src, dst, e_id = induced_edges(graph, nodes, node_group, ordered=False)
    return node_group, nodes, node_group[src], nodes[src], nodes[dst], e_id


def assert_unbiased(estimate_sum, estimate_sq, appearances, truth, count_error):
    """Mean estimate per node within 5 standard errors of the draws plus 5 sigmas of coefficient error."""
    mean = estimate_sum / appearances
    var = (estimate_sq / appearances - mean ** 2).clamp(min=0)
    bound = SIGMAS * torch.sqrt(var / appearances) + count_error + 1e-9
    assert bool(((mean - truth).abs() <= bound).all()), ((mean - truth).abs() / bound).max()


@pytest.mark.parametrize("norm", ["paper", "pyg"])
def test_normalised_aggregation_is_unbiased(norm):
    """paper: Σ_{j→i sampled} edge_norm·x_j estimates Σ_{j→i} x_j given i sampled (aggregation into targets).
    pyg: C_src/C_e estimates the aggregation into the source, Σ_{j→i sampled} edge_norm·x_i ≈ Σ_{j→i} x_i."""
    graph = skewed_graph()
    sampler = SaintRandomWalkSampler(roots=2, walk_length=2)
    sn = compute_saint_norm(graph, sampler, sample_coverage=20_000, norm=norm,
                            train_mask=torch.ones(17, dtype=torch.bool), seed=0)
    x = torch.arange(1, 18, dtype=torch.float64)
    src, dst = graph.edge_index
    into, frm = (dst, src) if norm == "paper" else (src, dst)
    truth = torch.zeros(17, dtype=torch.float64).index_add_(0, into, x[frm])
    # coefficient error: C_e / C_into estimates p_e / p_into with relative std sqrt((1 − r) / C_e)
    c_e, c_into = sn.edge_count.double(), sn.node_count[into].double()
    rel = ((1 - c_e / c_into).clamp(min=0) / c_e.clamp(min=1)).sqrt()
    count_error = SIGMAS * torch.zeros(17, dtype=torch.float64).index_add_(0, into, (x[frm] * rel) ** 2).sqrt()

    trials = 40_000
    node_group, nodes, edge_group, e_src, e_dst, e_id = batched_subgraphs(
        graph, sampler, trials, torch.Generator().manual_seed(1))
    e_into = e_dst if norm == "paper" else e_src
    e_from = e_src if norm == "paper" else e_dst
    estimate = torch.zeros(trials * 17, dtype=torch.float64)
    estimate.index_add_(0, edge_group * 17 + e_into, sn.edge_norm[e_id].double() * x[e_from])
    present = node_group * 17 + nodes
    per_node = estimate[present]
    total = torch.zeros(17, dtype=torch.float64).index_add_(0, nodes, per_node)
    square = torch.zeros(17, dtype=torch.float64).index_add_(0, nodes, per_node ** 2)
    appearances = torch.zeros(17, dtype=torch.float64).index_add_(0, nodes, torch.ones_like(per_node))
    assert bool((appearances > 500).all())
    assert_unbiased(total, square, appearances, truth, count_error)


def test_pyg_edge_norm_is_biased_for_aggregation_into_targets():
    """The reason for the paper convention: with C_src/C_e the target-side estimate is off on this graph."""
    graph = skewed_graph()
    sampler = SaintRandomWalkSampler(roots=2, walk_length=2)
    sn = compute_saint_norm(graph, sampler, sample_coverage=2_000, norm="pyg", seed=0)
    src, dst = graph.edge_index
    # expected target-side estimate per unit message: Σ_e (C_e / C_dst) · C_src / C_e = Σ_e C_src / C_dst
    ratio = sn.node_count[src].double() / sn.node_count[dst].double()
    hub_in = ratio[dst == 0].sum() / int((dst == 0).sum())
    assert hub_in < 0.8  # leaves are sampled less often than the hub: the hub's aggregate is underestimated


@pytest.mark.parametrize("norm", ["pyg", "paper"])
def test_normalised_loss_is_unbiased(norm):
    graph = skewed_graph()
    train = torch.ones(17, dtype=torch.bool)
    train[[2, 11, 16]] = norm == "pyg"
    sampler = SaintRandomWalkSampler(roots=2, walk_length=2)
    sn = compute_saint_norm(graph, sampler, sample_coverage=20_000, norm=norm, train_mask=train, seed=0)
    loss = torch.linspace(0.5, 3.0, 17, dtype=torch.float64)
    truth = loss[train].mean()
    p_hat = sn.node_count.double() / sn.num_samples
    rel = ((1 - p_hat).clamp(min=0) / sn.node_count.double().clamp(min=1)).sqrt()
    weight = loss / int(train.sum())
    count_error = SIGMAS * ((weight * rel)[train] ** 2).sum().sqrt()

    trials = 40_000
    sample_graph = graph
    node_map = torch.arange(17)
    if norm == "paper":
        from graphfuse.samplers import training_subgraph

        sample_graph, sub = training_subgraph(graph, train)
        node_map = sub.n_id
    node_group, nodes, *_ = batched_subgraphs(sample_graph, sampler, trials, torch.Generator().manual_seed(2))
    nodes = node_map[nodes]
    z = torch.zeros(trials, dtype=torch.float64).index_add_(0, node_group,
                                                            sn.node_norm[nodes].double() * loss[nodes])
    bound = SIGMAS * z.std() / trials ** 0.5 + count_error
    assert abs(z.mean() - truth) <= bound, (z.mean(), truth, bound)


# --------------------------------------------------------------------------- CPU vs CUDA


def two_sample_bound(p1, p2, trials):
    p = (p1 + p2) / 2
    return SIGMAS * torch.sqrt(2 * p * (1 - p) / trials) + 1e-9


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_and_cuda_draws_are_identically_distributed(name):
    sampler, probability = CASES[name]
    trials = 3000
    freqs = {}
    for device in ("cpu", "cuda"):
        graph = skewed_graph(device)
        freqs[device] = inclusion_frequency(sampler, graph, trials, torch.Generator(device=device).manual_seed(0))
    assert bool(((freqs["cpu"] - freqs["cuda"]).abs() <= two_sample_bound(freqs["cpu"], freqs["cuda"], trials)).all())
    p = probability(skewed_graph())
    assert bool(((freqs["cuda"] - p).abs() <= binomial_bound(p, trials) + 1e-12).all())


@pytest.mark.gpu
def test_cpu_and_cuda_normalisation_counts_agree():
    sampler = SaintRandomWalkSampler(roots=2, walk_length=2)
    out = {}
    for device in ("cpu", "cuda"):
        graph = skewed_graph(device)
        node_count, edge_count, m = count_saint_samples(graph, sampler, 3000,
                                                        torch.Generator(device=device).manual_seed(0))
        out[device] = (node_count.cpu() / m, edge_count.cpu() / m, m)
    m = min(out["cpu"][2], out["cuda"][2])
    for k in (0, 1):
        a, b = out["cpu"][k].double(), out["cuda"][k].double()
        assert bool(((a - b).abs() <= two_sample_bound(a, b, m)).all())


@pytest.mark.gpu
def test_cpu_and_cuda_neighbour_sampling_agree():
    graph_cpu = skewed_graph()
    seeds = torch.zeros(4000, dtype=torch.long)
    freqs = {}
    for device in ("cpu", "cuda"):
        graph = graph_cpu.to(device)
        hop = sample_neighbors(graph, seeds.to(device), 3, generator=torch.Generator(device=device).manual_seed(0))
        assert hop.e_id.numel() == 3 * 4000
        freqs[device] = torch.bincount(hop.e_id.cpu(), minlength=graph.num_edges).double() / 4000
    expected = (graph_cpu.edge_index[1] == 0).double() * 3 / 9  # 3 of the hub's 9 in-neighbours
    assert bool(((freqs["cpu"] - freqs["cuda"]).abs() <= two_sample_bound(freqs["cpu"], freqs["cuda"], 4000)).all())
    assert bool(((freqs["cuda"] - expected).abs() <= binomial_bound(expected, 4000) + 1e-12).all())


@pytest.mark.gpu
def test_deterministic_parts_are_identical_on_cpu_and_cuda():
    cpu, cuda = skewed_graph(), skewed_graph("cuda")
    nodes = torch.tensor([0, 3, 5, 10, 12, 15, 7])
    a, b = induced_subgraph(cpu, nodes), induced_subgraph(cuda, nodes.cuda())
    assert all(torch.equal(u, v.cpu()) for u, v in zip((a.n_id, a.edge_index, a.e_id), (b.n_id, b.edge_index, b.e_id)))
    for kind in ("directional", "bidirectional", "induced"):
        s = NeighborSampler([-1, -1], subgraph_type=kind)
        a, b = s(cpu, torch.tensor([10, 0])), s(cuda, torch.tensor([10, 0], device="cuda"))
        assert torch.equal(a.n_id, b.n_id.cpu()) and torch.equal(a.edge_index, b.edge_index.cpu())
        assert torch.equal(a.e_id, b.e_id.cpu())
    assert graph_fingerprint(cpu) == graph_fingerprint(graphfuse.Graph(cuda.edge_index, num_nodes=17))
