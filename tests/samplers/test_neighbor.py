"""Neighbour sampling: PyG NeighborLoader semantics, checked exactly on hand-built graphs and as invariants on
random ones."""

from __future__ import annotations

import pytest
import torch

import graphfuse
from cases import make_graph_case
from graphfuse.samplers import NeighborSampler, sample_neighbors


def diamond() -> graphfuse.Graph:
    """Edges j → i (i samples j):  1→0, 2→0, 3→1, 3→2, 4→3, 0→4, 2→1."""
    return graphfuse.Graph(torch.tensor([[1, 2, 3, 3, 4, 0, 2], [0, 0, 1, 2, 3, 4, 1]]), num_nodes=5)


def random_graph(device, n=40, e=300, seed=0) -> graphfuse.Graph:
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, e), generator=gen)
    hub = torch.stack([torch.arange(n), torch.zeros(n, dtype=torch.long)])  # node 0 has in-degree ≥ n
    return graphfuse.Graph(torch.cat([edge_index, hub], 1), num_nodes=n).to(device)


def check_directional(graph, seeds, fanouts, out, replace=False):
    """Every invariant of directional NeighborLoader output (one tree, or each tree when disjoint)."""
    n_id, (row, col), e_id = out.n_id.cpu(), out.edge_index.cpu(), out.e_id.cpu()
    src, dst = graph.edge_index.cpu()
    degree = graph.in_degree.cpu()
    tree = out.batch.cpu() if out.batch is not None else torch.zeros_like(n_id)
    assert n_id[: seeds.numel()].tolist() == seeds.cpu().tolist()
    assert out.batch_size == seeds.numel()
    # each local edge is a graph edge: neighbour (source) → the node that sampled it (target), same tree
    assert torch.equal(src[e_id], n_id[row]) and torch.equal(dst[e_id], n_id[col])
    assert torch.equal(tree[row], tree[col])
    # nodes are distinct within a tree
    pairs = list(zip(tree.tolist(), n_id.tolist()))
    assert len(set(pairs)) == len(pairs)
    cum_nodes = torch.tensor([0, *out.num_sampled_nodes]).cumsum(0).tolist()
    cum_edges = torch.tensor([0, *out.num_sampled_edges]).cumsum(0).tolist()
    assert cum_nodes[-1] == n_id.numel() and cum_edges[-1] == e_id.numel()
    for hop, k in enumerate(fanouts):
        lo, hi = cum_edges[hop], cum_edges[hop + 1]
        r, c, e = row[lo:hi], col[lo:hi], e_id[lo:hi]
        # only the nodes added in the previous hop are expanded, in order
        assert bool(((c >= cum_nodes[hop]) & (c < cum_nodes[hop + 1])).all())
        assert c.tolist() == sorted(c.tolist())
        for node in range(cum_nodes[hop], cum_nodes[hop + 1]):
            mine = e[c == node]
            d = int(degree[n_id[node]])
            expected = d if k < 0 else (min(k, d) if not replace else (k if d > 0 else 0))
            assert mine.numel() == expected
            if not replace:
                assert len(set(mine.tolist())) == mine.numel()
        # nodes new in this hop get ids in order of first appearance among the hop's neighbours
        fresh = [v for v in r.tolist() if v >= cum_nodes[hop + 1]]
        assert list(dict.fromkeys(fresh)) == list(range(cum_nodes[hop + 1], cum_nodes[hop + 2]))
        assert bool((r < cum_nodes[hop + 2]).all())


def test_exact_output_on_a_hand_built_graph():
    out = NeighborSampler([-1, -1])(diamond(), torch.tensor([0]))
    # hop 1: 0 samples 1 (e0), 2 (e1) → ids 1, 2. hop 2: 1 samples 3 (e2), 2 (e6); 2 samples 3 (e3) → 3 new.
    assert out.n_id.tolist() == [0, 1, 2, 3]
    assert out.edge_index.tolist() == [[1, 2, 3, 2, 3], [0, 0, 1, 1, 2]]
    assert out.e_id.tolist() == [0, 1, 2, 6, 3]
    assert out.num_sampled_nodes == (1, 2, 1) and out.num_sampled_edges == (2, 3)
    assert out.batch is None


def test_present_node_keeps_its_id_and_is_not_expanded_again():
    # seeds 0 and 1: 1 is a neighbour of 0 but keeps id 1; 2 is reached from both and gets one id
    out = NeighborSampler([-1, -1])(diamond(), torch.tensor([0, 1]))
    assert out.n_id.tolist() == [0, 1, 2, 3, 4]
    # hop 1: 0 samples 1 (e0, id 1), 2 (e1, new id 2); 1 samples 3 (e2, new id 3), 2 (e6, id 2)
    assert out.edge_index[:, :4].tolist() == [[1, 2, 3, 2], [0, 0, 1, 1]]
    # hop 2 expands 2 and 3 (new in hop 1) only: 2 samples 3 (e3), 3 samples 4 (e4)
    assert out.edge_index[:, 4:].tolist() == [[3, 4], [2, 3]]
    assert out.e_id.tolist() == [0, 1, 2, 6, 3, 4]
    assert out.num_sampled_nodes == (2, 2, 1) and out.num_sampled_edges == (4, 2)


@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("fanouts", [[3], [4, 2], [-1, 3, 2], [2, 0, 5], [1, 1, 1, 1]])
def test_invariants_on_random_graphs(fanouts, replace, device):
    graph = random_graph(device)
    gen = torch.Generator(device=device).manual_seed(0)
    sampler = NeighborSampler(fanouts, replace=replace)
    for trial in range(3):
        seeds = torch.randperm(graph.num_nodes, generator=torch.Generator().manual_seed(trial))[:6].to(device)
        check_directional(graph, seeds, fanouts, sampler(graph, seeds, gen), replace)


def test_fanout_beyond_degree_takes_all_distinct_neighbours():
    graph = random_graph("cpu")
    seeds = torch.arange(graph.num_nodes)
    out = NeighborSampler([10_000])(graph, seeds, torch.Generator().manual_seed(0))
    # with a fan-out larger than any degree, hop 1 is every in-edge of every seed, in CSR order
    assert torch.equal(out.e_id, graph.csr.perm)


def test_a_fanout_of_at_least_the_largest_degree_takes_everything_without_drawing():
    """A PyG user's large fan-out meaning 'all' ran Floyd's k steps per row anyway (cost ~k², 6.8 s for k = 400
    on a graph of in-degree ≤ 25, against 28 ms for -1; review): it is now the -1 path, which draws nothing."""
    g = make_graph_case("hub")
    nodes = torch.arange(g.num_nodes)
    largest = int(g.in_degree.max())
    everything = sample_neighbors(g, nodes, -1)
    for k in (largest, 4 * largest):
        gen = torch.Generator().manual_seed(0)
        got = sample_neighbors(g, nodes, k, generator=gen)
        assert all(torch.equal(a, b) for a, b in zip(got, everything))
        assert torch.equal(gen.get_state(), torch.Generator().manual_seed(0).get_state())
    gen = torch.Generator().manual_seed(0)
    sample_neighbors(g, nodes, largest - 1, generator=gen)  # below it: drawn as before
    assert not torch.equal(gen.get_state(), torch.Generator().manual_seed(0).get_state())


def test_with_replacement_repeats_and_without_does_not():
    star = graphfuse.Graph(torch.tensor([[1, 2], [0, 0]]), num_nodes=3)
    gen = torch.Generator().manual_seed(0)
    with_replacement = [NeighborSampler([6], replace=True)(star, torch.tensor([0]), gen) for _ in range(5)]
    assert all(o.e_id.numel() == 6 for o in with_replacement)
    assert any(len(set(o.e_id.tolist())) < o.e_id.numel() for o in with_replacement)
    without = NeighborSampler([6])(star, torch.tensor([0]), gen)
    assert sorted(without.e_id.tolist()) == [0, 1]


def test_without_replacement_subsets_are_uniform():
    # node 0 has 6 in-neighbours; k = 2 → each of the 15 pairs with probability 1/15
    graph = graphfuse.Graph(torch.stack([torch.arange(1, 7), torch.zeros(6, dtype=torch.long)]), num_nodes=7)
    gen = torch.Generator().manual_seed(0)
    trials = 3000
    seeds = torch.zeros(trials, dtype=torch.long)
    hop = sample_neighbors(graph, seeds, 2, generator=gen)
    assert torch.equal(hop.owner, torch.arange(trials).repeat_interleave(2))
    pairs = hop.nbr.view(trials, 2)
    assert bool((pairs[:, 0] < pairs[:, 1]).all())  # distinct, in CSR order
    counts = torch.zeros(7, 7)
    counts.index_put_((pairs[:, 0], pairs[:, 1]), torch.ones(trials), accumulate=True)
    p = 1 / 15
    observed = counts[1:, 1:][torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)] / trials
    assert observed.numel() == 15
    assert bool(((observed - p).abs() <= 5 * (p * (1 - p) / trials) ** 0.5).all())
    # k = 4 of 6: each of the 15 four-subsets (coded as bitmasks) with probability 1/15
    quads = sample_neighbors(graph, seeds, 4, generator=gen).nbr.view(trials, 4)
    assert bool((quads.diff(dim=1) > 0).all())
    code = (1 << quads).sum(1)
    observed = torch.bincount(code, minlength=128).double()
    observed = observed[observed > 0] / trials
    assert observed.numel() == 15
    assert bool(((observed - p).abs() <= 5 * (p * (1 - p) / trials) ** 0.5).all())


def test_seeds_first_even_when_one_is_another_seeds_neighbour(device):
    graph = diamond().to(device)
    seeds = torch.tensor([3, 0, 4], device=device)
    out = NeighborSampler([-1])(graph, seeds)
    assert out.n_id[:3].tolist() == [3, 0, 4]
    # 3 samples 4 (already seed #2), 0 samples 1, 2; 4 samples 0 (seed #1)
    assert out.edge_index.tolist() == [[2, 3, 4, 1], [0, 1, 1, 2]]


def brute_induced(graph, n_id, batch=None):
    src, _dst = graph.edge_index.cpu().tolist()
    tree = batch.tolist() if batch is not None else [0] * n_id.numel()
    local = {(t, v): k for k, (t, v) in enumerate(zip(tree, n_id.tolist()))}
    edges = []
    for i, (t, v) in enumerate(zip(tree, n_id.tolist())):
        for e in graph.csr.perm[graph.csr.rowptr[v]:graph.csr.rowptr[v + 1]].tolist():
            if (t, src[e]) in local:
                edges.append((local[(t, src[e])], i, e))
    return edges


@pytest.mark.parametrize("disjoint", [False, True])
def test_induced_keeps_every_edge_between_sampled_nodes(disjoint, device):
    graph = random_graph(device, seed=3)
    seeds = torch.tensor([5, 9, 0], device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    directional = NeighborSampler([3, 2], disjoint=disjoint)(graph, seeds, gen)
    gen = torch.Generator(device=device).manual_seed(0)
    induced = NeighborSampler([3, 2], subgraph_type="induced", disjoint=disjoint)(graph, seeds, gen)
    assert torch.equal(induced.n_id, directional.n_id)
    got = list(zip(*induced.edge_index.tolist(), induced.e_id.tolist()))
    assert got == brute_induced(graph, induced.n_id, induced.batch)
    assert set(zip(*directional.edge_index.tolist())) <= set(zip(*induced.edge_index.tolist()))
    assert induced.num_sampled_nodes == directional.num_sampled_nodes and induced.num_sampled_edges is None


def test_bidirectional_adds_reverse_edges_coalesced():
    out = NeighborSampler([-1], subgraph_type="bidirectional")(diamond(), torch.tensor([0]))
    # sampled 1→0 (e0), 2→0 (e1); reverses 0→1, 0→2 carry the same ids; sorted by (target, source)
    assert out.edge_index.tolist() == [[1, 2, 0, 0], [0, 0, 1, 2]]
    assert out.e_id.tolist() == [0, 1, 0, 1]
    assert out.num_sampled_edges is None


def test_bidirectional_matches_pyg_to_bidirectional(device):
    from torch_geometric.sampler.utils import to_bidirectional

    graph = random_graph(device, seed=4)
    seeds = torch.tensor([1, 2, 3], device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    directional = NeighborSampler([4, 3], replace=True)(graph, seeds, gen)
    gen = torch.Generator(device=device).manual_seed(0)
    both = NeighborSampler([4, 3], replace=True, subgraph_type="bidirectional")(graph, seeds, gen)
    row, col = directional.edge_index.cpu()
    ref_row, ref_col, _ = to_bidirectional(row, col, row, col)
    assert both.edge_index.cpu().tolist() == [ref_row.tolist(), ref_col.tolist()]


def test_bidirectional_edges_keep_their_own_ids(device):
    """Where a sampled edge's reverse is itself a sampled edge (a 2-cycle), the merged edge keeps its own id (the
    loader gathers edge_weight[e_id]); an added reverse carries the id of the edge it reverses."""
    two_cycle = graphfuse.Graph(torch.tensor([[1, 0], [0, 1]], device=device), num_nodes=2)
    out = NeighborSampler([-1, -1], subgraph_type="bidirectional")(two_cycle, torch.tensor([0], device=device))
    assert out.edge_index.tolist() == [[1, 0], [0, 1]] and out.e_id.tolist() == [0, 1]
    graph = random_graph(device, seed=4)
    seeds = torch.tensor([1, 2, 3], device=device)
    for draw in range(10):  # the first draw that samples an edge and its reverse (a 2-cycle)
        directional = NeighborSampler([4, 3])(graph, seeds, torch.Generator(device=device).manual_seed(draw))
        own: dict[tuple[int, int], set[int]] = {}  # the graph has parallel edges: coalesced, one id kept
        for (s, d), e in zip(directional.edge_index.t().tolist(), directional.e_id.tolist(), strict=True):
            own.setdefault((s, d), set()).add(e)
        if any((d, s) in own for s, d in own):
            break
    both = NeighborSampler([4, 3], subgraph_type="bidirectional")(graph, seeds,
                                                                   torch.Generator(device=device).manual_seed(draw))
    n_id, coo = both.n_id.tolist(), graph.edge_index.t().tolist()
    for (s, d), e in zip(both.edge_index.t().tolist(), both.e_id.tolist(), strict=True):
        if (s, d) in own:
            assert e in own[(s, d)]
        else:  # an added reverse
            assert coo[e] == [n_id[d], n_id[s]] and e in own[(d, s)]
    assert any((d, s) in own for s, d in own), "the case should hold a sampled edge whose reverse is sampled too"


def test_with_replacement_draws_are_uniform():
    """Each of node 0's 6 in-edges with probability 1/6 per draw (a draw biased to the first or away from the
    last in-edge passed every other sampler test)."""
    graph = graphfuse.Graph(torch.stack([torch.arange(1, 7), torch.zeros(6, dtype=torch.long)]), num_nodes=7)
    trials = 3000
    hop = sample_neighbors(graph, torch.zeros(trials, dtype=torch.long), 2, replace=True,
                           generator=torch.Generator().manual_seed(0))
    observed = torch.bincount(hop.nbr, minlength=7)[1:].double() / hop.nbr.numel()
    p = 1 / 6
    assert bool(((observed - p).abs() <= 5 * (p * (1 - p) / hop.nbr.numel()) ** 0.5).all())


def test_a_node_without_in_edges_draws_nothing_with_replacement():
    """Mutation audit: drawing with replacement from a row of degree 0 would take the next row's edge (or index
    past the end for the last row); every test graph had in-edges at every node."""
    graph = graphfuse.Graph(torch.tensor([[0], [1]]), num_nodes=2)  # node 0: no in-edges
    for seeds in (torch.tensor([0]), torch.tensor([0, 1, 0])):
        hop = sample_neighbors(graph, seeds, 2, replace=True, generator=torch.Generator().manual_seed(0))
        assert hop.e_id.tolist() == [0, 0] * int((seeds == 1).sum()) and hop.nbr.tolist() == hop.e_id.tolist()


def test_disjoint_grows_one_tree_per_seed(device):
    graph = random_graph(device, seed=1)
    seeds = torch.tensor([0, 7, 7, 12], device=device)
    gen = torch.Generator(device=device).manual_seed(2)
    out = NeighborSampler([3, 2], disjoint=True)(graph, seeds, gen)
    check_directional(graph, seeds, [3, 2], out)
    batch = out.batch.cpu()
    assert batch[:4].tolist() == [0, 1, 2, 3]
    # the repeated seed 7 grows two trees of its own: the same node may appear in both
    for t in range(4):
        assert out.n_id.cpu()[batch == t][0].item() == seeds[t].item()
    hop1 = out.num_sampled_edges[0]
    assert out.edge_index[1, :hop1].cpu().tolist() == sorted(out.edge_index[1, :hop1].cpu().tolist())
    shared = set(out.n_id.cpu()[batch == 1].tolist()) & set(out.n_id.cpu()[batch == 2].tolist())
    assert 7 in shared


def test_repeated_seed_keeps_both_rows_and_links_to_the_first():
    out = NeighborSampler([-1])(diamond(), torch.tensor([4, 4]))
    assert out.n_id.tolist() == [4, 4, 0]
    assert out.edge_index.tolist() == [[2, 2], [0, 1]]


def test_induced_repeated_seed_links_to_its_first_row(device):
    # 1→0 (e0), 0→1 (e1), 2→0 (e2); seed 0 twice: rows 0 and 1
    graph = graphfuse.Graph(torch.tensor([[1, 0, 2], [0, 1, 0]]), num_nodes=3).to(device)
    seeds = torch.tensor([0, 0], device=device)
    directional = NeighborSampler([-1, -1])(graph, seeds)
    induced = NeighborSampler([-1, -1], subgraph_type="induced")(graph, seeds)
    assert induced.n_id.tolist() == directional.n_id.tolist() == [0, 0, 1, 2]
    # directional: both rows sample 1 and 2; in hop 2 node 1 samples the seed, linked to its first row
    assert directional.edge_index.tolist() == [[2, 3, 2, 3, 0], [0, 0, 1, 1, 2]]
    # induced: every edge once, the seed's in-edges on row 0 and its out-edge 0→1 from row 0, as directional
    assert induced.edge_index.tolist() == [[2, 3, 0], [0, 0, 2]]
    assert induced.e_id.tolist() == [0, 2, 1]
    assert induced.edge_index[1, -1].item() == directional.edge_index[1, -1].item()
    assert induced.edge_index[0, -1].item() == directional.edge_index[0, -1].item() == 0


@pytest.mark.parametrize("seeds", [[4, 4], [4, 2, 4, 4]])
def test_induced_repeated_seed_adds_only_an_edgeless_row(seeds, device):
    """With all neighbours taken, repeating a seed inserts edgeless rows and changes nothing else, also when
    the seed owns its edges in induced extraction (node 4 has the lowest degree of the diamond)."""
    graph = diamond().to(device)
    sampler = NeighborSampler([-1, -1], subgraph_type="induced")
    repeated = sampler(graph, torch.tensor(seeds, device=device))
    distinct = sampler(graph, torch.tensor(list(dict.fromkeys(seeds)), device=device))
    first = [k for k, v in enumerate(seeds) if v not in seeds[:k]]
    rows = torch.tensor(first + list(range(len(seeds), repeated.num_nodes)), device=device)
    assert repeated.num_nodes == distinct.num_nodes + len(seeds) - len(first)
    assert torch.equal(repeated.n_id[rows], distinct.n_id)
    assert torch.equal(repeated.edge_index, rows[distinct.edge_index])
    assert torch.equal(repeated.e_id, distinct.e_id)
    if seeds == [4, 4]:
        # n_id = [4, 4, 0, 1, 2]: 0→4 (e5), 1→0 (e0), 2→0 (e1), 2→1 (e6)
        assert repeated.edge_index.tolist() == [[2, 3, 4, 4], [0, 2, 2, 3]]
        assert repeated.e_id.tolist() == [5, 0, 1, 6]


def test_empty_frontiers_and_no_seeds():
    graph = graphfuse.Graph(torch.tensor([[1], [0]]), num_nodes=3)
    out = NeighborSampler([2, 2, 2])(graph, torch.tensor([2]))
    assert out.n_id.tolist() == [2] and out.edge_index.shape == (2, 0)
    assert out.num_sampled_nodes == (1, 0, 0, 0) and out.num_sampled_edges == (0, 0, 0)
    out = NeighborSampler([2])(graph, torch.empty(0, dtype=torch.long))
    assert out.n_id.numel() == 0 and out.e_id.numel() == 0


def test_argument_checks():
    with pytest.raises(TypeError, match="num_neighbors"):
        NeighborSampler(5)
    with pytest.raises(ValueError, match="num_neighbors"):
        NeighborSampler([3, -2])
    with pytest.raises(ValueError, match="subgraph_type"):
        NeighborSampler([3], subgraph_type="both")
    with pytest.raises(ValueError, match="seeds"):
        NeighborSampler([3])(diamond(), torch.tensor([[0]]))
    for bad in ([0, 1], torch.tensor([0.0]), torch.tensor([True])):  # a list was an AttributeError; TypeError as
        with pytest.raises(TypeError, match="NeighborSampler: seeds must be an int64 or int32 tensor"):  # elsewhere
            NeighborSampler([3])(diamond(), bad)
    n = diamond().num_nodes
    for disjoint in (False, True):  # -1 was taken silently in disjoint mode (x[-1] gathered later)
        for bad in ([-1], [0, n]):
            with pytest.raises(ValueError, match=rf"NeighborSampler: seeds must be node ids in \[0, {n}\)"):
                NeighborSampler([3], disjoint=disjoint)(diamond(), torch.tensor(bad))
    with pytest.raises(ValueError, match="square"):
        NeighborSampler([3])(make_graph_case("bipartite"), torch.tensor([0]))


def test_sample_neighbors_names_bad_arguments():
    # -5 took every in-edge like -1, 1.5 failed inside torch.rand, an out-of-range node with an IndexError
    graph = diamond()
    for k in (-5, 1.5, True):
        with pytest.raises(ValueError, match=r"sample_neighbors: num_neighbors must be an int ≥ -1"):
            sample_neighbors(graph, torch.tensor([0]), k)
    n = graph.num_nodes
    for bad in ([n], [-1, 0]):
        with pytest.raises(ValueError, match=rf"sample_neighbors: nodes must be node ids in \[0, {n}\)"):
            sample_neighbors(graph, torch.tensor(bad), 2)
    with pytest.raises(TypeError, match="sample_neighbors: nodes must be an int64 or int32 tensor"):
        sample_neighbors(graph, torch.tensor([0.5]), 2)
    assert sample_neighbors(graph, torch.tensor([0], dtype=torch.int32), -1).owner.numel() == graph.in_degree[0]


@pytest.mark.gpu
@pytest.mark.parametrize("k", [1, 2, 15, 40, 64, 512])
def test_floyd_kernel_equals_the_pytorch_loop(k):
    """k = 64 and 512 and the 582,193-degree hub: ES-SpMM's random strategy takes its kept sets (and its tests'
    references theirs) from this kernel at widths up to 512."""
    from graphfuse.kernels import sampling

    special = torch.tensor([0, 1, max(k - 1, 0), k, k + 1, 2 * k, 100_000, 577 * 1009])
    degree = torch.cat([special, torch.randint(0, 3 * k + 2, (5000,))]).cuda()
    draws = torch.rand(degree.numel(), k, dtype=torch.float64, device="cuda")
    kernel = sampling.floyd_picks(degree, draws)
    assert torch.equal(kernel, sampling.floyd_picks_reference(degree, draws))
    bound = degree.clamp(min=k).unsqueeze(1)
    assert bool((kernel >= 0).all()) and bool((kernel < bound).all())
    assert bool((kernel[:, 1:] > kernel[:, :-1]).all())  # sorted and distinct


def test_induced_keeps_edges_when_repeated_seeds_outnumber_the_nodes():
    path = graphfuse.Graph(torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]]), num_nodes=3)
    out = NeighborSampler((0,), subgraph_type="induced")(path, torch.tensor([0, 0, 0, 0, 1, 2]))
    edges = set(map(tuple, out.edge_index.t().tolist()))
    assert edges == {(0, 4), (4, 0), (4, 5), (5, 4)}  # rows 0, 4, 5 are the first rows of nodes 0, 1, 2


def test_generators_switches_and_id_ranks_are_checked():
    """A non-generator failed with "'int' object has no attribute 'device'", replace='no' sampled with
    replacement, and 2-D ids failed inside torch (sample_neighbors) or came back with a wrong shape (random_walk)."""
    graph = make_graph_case("hub")
    seeds = torch.tensor([0, 1])
    with pytest.raises(TypeError, match="NeighborSampler: generator must be None or a torch.Generator; got int"):
        NeighborSampler([2])(graph, seeds, 3)
    with pytest.raises(TypeError, match="SaintNodeSampler|generator must be None or a torch.Generator"):
        graphfuse.samplers.SaintNodeSampler(3)(graph, 5)
    with pytest.raises(TypeError, match="sample_neighbors: replace must be a bool"):
        sample_neighbors(graph, seeds, 2, replace="no")
    with pytest.raises(TypeError, match="NeighborSampler: replace must be a bool"):
        NeighborSampler([2], replace="no")
    with pytest.raises(ValueError, match="sample_neighbors: nodes must be a 1-D tensor"):
        sample_neighbors(graph, seeds.view(1, 2), -1)
    with pytest.raises(ValueError, match="random_walk: start must be a 1-D tensor"):
        graphfuse.samplers.random_walk(graph, seeds.view(1, 2), 2)


@pytest.mark.parametrize("subgraph_type", ["directional", "bidirectional", "induced"])
def test_graphs_over_the_dense_limit_sample_the_same(subgraph_type, device, monkeypatch):
    """Past MAX_DENSE nodes the node set and the induced lookup use sorted keys instead of (N,) tables (a
    batch of 64 seeds filled 888 MB per map on a 111M-node graph): the same draws give the same sample."""
    import graphfuse.samplers.neighbor as neighbor
    import graphfuse.samplers.subgraph as subgraph

    graph = random_graph(device, n=60, e=500, seed=3)
    seeds = torch.tensor([5, 0, 17, 5, 42], device=device)  # a repeated seed, the hub
    sampler = NeighborSampler([4, -1, 2], subgraph_type=subgraph_type)
    outs = []
    for limit in (subgraph.MAX_DENSE, 0):
        monkeypatch.setattr(neighbor, "MAX_DENSE", limit)
        monkeypatch.setattr(subgraph, "MAX_DENSE", limit)
        outs.append(sampler(graph, seeds, torch.Generator(device=device).manual_seed(7)))
    dense, keyed = outs
    assert keyed.n_id.numel() > seeds.numel() and keyed.e_id.numel() > 0
    for name in ("n_id", "edge_index", "e_id"):
        assert torch.equal(getattr(dense, name), getattr(keyed, name)), name
    assert dense.num_sampled_nodes == keyed.num_sampled_nodes


def test_the_dense_node_map_and_the_key_set_number_nodes_alike(device):
    """_NodeMap finds first appearances through a dense scatter, _KeySet through a sort: the same local ids and new
    nodes, in order of first appearance, for candidates with repeats, seen nodes and repeated seeds."""
    from graphfuse.samplers.neighbor import _KeySet, _NodeMap

    gen = torch.Generator().manual_seed(0)
    seeds = torch.tensor([5, 3, 5, 9], device=device)
    dense, keys = _NodeMap(20, seeds), _KeySet(seeds)
    count = seeds.numel()
    for _ in range(4):
        cand = torch.randint(0, 20, (30,), generator=gen).to(device)
        (local_a, new_a), (local_b, new_b) = dense.add(cand, count), keys.add(cand, count)
        assert torch.equal(local_a, local_b) and torch.equal(new_a, new_b)
        assert bool((local_a >= 0).all()) and new_a.unique().numel() == new_a.numel()
        count += new_a.numel()
    assert dense.find(seeds).tolist() == keys.find(seeds).tolist() == [0, 1, 0, 3]
