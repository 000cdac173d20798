"""Loaders: gathered batches, normalisation per batch, input nodes / shuffle / drop_last, seeds, to_pyg."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

import graphfuse
from cases import make_graph_case
from graphfuse.samplers import (
    Batch,
    NeighborLoader,
    SaintEdgeSampler,
    SaintLoader,
    SaintNodeSampler,
    SaintRandomWalkSampler,
    compute_saint_norm,
    count_saint_samples,
    presampling_seed,
)


def node_data(graph: graphfuse.Graph, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    n = graph.num_nodes
    x = torch.randn(n, 7, generator=gen).to(graph.device)
    y = torch.randint(0, 3, (n,), generator=gen).to(graph.device)
    train = (torch.rand(n, generator=gen) < 0.5).to(graph.device)
    return x, y, train


def check_batch(graph, batch, x, y, train):
    assert isinstance(batch, Batch) and isinstance(batch.graph, graphfuse.Graph)
    assert torch.equal(batch.x, x[batch.n_id]) and torch.equal(batch.y, y[batch.n_id])
    assert torch.equal(batch.train_mask, train[batch.n_id])
    src, dst = graph.edge_index
    assert torch.equal(src[batch.e_id], batch.n_id[batch.edge_index[0]])
    assert torch.equal(dst[batch.e_id], batch.n_id[batch.edge_index[1]])
    assert batch.graph.device == graph.device and batch.x.device == graph.device


@pytest.mark.parametrize("sampler", [SaintNodeSampler(40), SaintEdgeSampler(20), SaintRandomWalkSampler(10, 2)],
                         ids=lambda s: s.name)
def test_saint_batches_gather_and_carry_norms(sampler, device):
    graph = make_graph_case("hub", device)
    x, y, train = node_data(graph)
    loader = SaintLoader(graph, sampler, x=x, y=y, node_data={"train_mask": train}, num_steps=3,
                         sample_coverage=5, seed=0)
    batches = list(loader)
    assert len(loader) == len(batches) == 3
    for batch in batches:
        check_batch(graph, batch, x, y, train)
        assert batch.batch_size == batch.num_nodes
        assert torch.equal(batch.node_norm, loader.saint_norm.node_norm[batch.n_id])
        assert torch.equal(batch.edge_norm, loader.saint_norm.edge_norm[batch.e_id])
        # the CSR filled in by the loader equals the one Graph builds by sorting
        fresh = graphfuse.Graph(batch.edge_index, num_nodes=batch.num_nodes)
        for a, b in zip(batch.graph.csr, fresh.csr):
            assert torch.equal(a, b)


def test_saint_paper_mode_samples_training_nodes_only(device):
    graph = make_graph_case("unsorted", device)
    x, y, train = node_data(graph)
    loader = SaintLoader(graph, SaintRandomWalkSampler(6, 2), x=x, y=y, node_data={"train_mask": train},
                         num_steps=4, sample_coverage=5, norm="paper", seed=1)
    for batch in loader:
        check_batch(graph, batch, x, y, train)
        assert bool(batch.train_mask.all())
        assert bool((batch.node_norm > 0).all())


def test_edge_weights_are_inherited_and_normalised_on_request(device):
    base = make_graph_case("hub", device)
    weight = torch.rand(base.num_edges, generator=torch.Generator().manual_seed(0)).to(device) + 0.5
    graph = graphfuse.Graph(base.edge_index, num_nodes=base.num_nodes, edge_weight=weight)
    plain = SaintLoader(graph, SaintRandomWalkSampler(8, 2), sample_coverage=3, seed=0)
    normalised = SaintLoader(graph, SaintRandomWalkSampler(8, 2), sample_coverage=3, seed=0, normalize_edges=True)
    a, b = plain.sample(), normalised.sample()
    assert torch.equal(a.graph.edge_weight, weight[a.e_id])
    assert torch.equal(b.graph.edge_weight, b.edge_norm * weight[b.e_id])
    nb = next(iter(NeighborLoader(graph, [3], batch_size=5)))
    assert torch.equal(nb.graph.edge_weight, weight[nb.e_id])
    with pytest.raises(ValueError, match="normalize_edges"):
        SaintLoader(graph, SaintRandomWalkSampler(8, 2), normalize_edges=True)


def test_saint_without_coverage_has_no_norms():
    graph = make_graph_case("hub")
    batch = next(iter(SaintLoader(graph, SaintNodeSampler(30), seed=0)))
    assert batch.node_norm is None and batch.edge_norm is None and batch.x is None
    assert batch.to_pyg().num_nodes == batch.num_nodes


def test_saint_loader_is_reproducible_by_seed(device):
    graph = make_graph_case("hub", device)
    runs = [[b.n_id for b in SaintLoader(graph, SaintRandomWalkSampler(5, 2), num_steps=4, seed=11)]
            for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    other = [b.n_id for b in SaintLoader(graph, SaintRandomWalkSampler(5, 2), num_steps=4, seed=12)]
    assert not all(torch.equal(a, b) for a, b in zip(runs[0], other))


@dataclasses.dataclass(frozen=True)
class RecordingNodeSampler(SaintNodeSampler):
    """A node sampler that keeps every node set it draws (pre-sampling and batches alike)."""

    drawn: list = dataclasses.field(default_factory=list, compare=False, hash=False)

    def draw(self, graph, num_samples, generator=None):
        raw = super().draw(graph, num_samples, generator)
        self.drawn.extend(tuple(sorted(set(row))) for row in raw.tolist())
        return raw


def test_saint_batches_are_not_the_pre_sampled_subgraphs():
    # The loader's batch generator and the pre-sampling generator were seeded alike, so the batches replayed
    # the subgraphs the normalisation was counted from (every batch node then had a non-zero count).
    graph = graphfuse.Graph(torch.randint(0, 2000, (2, 20_000), generator=torch.Generator().manual_seed(0)),
                            num_nodes=2000)
    sampler = RecordingNodeSampler(budget=300)
    loader = SaintLoader(graph, sampler, num_steps=20, sample_coverage=2, seed=0)
    presampled = set(sampler.drawn)
    sampler.drawn.clear()
    batches = [tuple(b.n_id.sort().values.tolist()) for b in loader]
    assert batches == sampler.drawn and not presampled & set(batches)
    again = compute_saint_norm(graph, SaintNodeSampler(budget=300), sample_coverage=2, seed=presampling_seed(0))
    assert torch.equal(again.node_count, loader.saint_norm.node_count)


@pytest.mark.parametrize("input_kind", ["mask", "ids", "all"])
def test_neighbor_loader_covers_input_nodes_once(input_kind, device):
    graph = make_graph_case("unsorted", device)
    x, y, train = node_data(graph)
    inputs = {"mask": train, "ids": train.nonzero().view(-1).flip(0), "all": None}[input_kind]
    expected = {"mask": train.nonzero().view(-1), "ids": train.nonzero().view(-1).flip(0),
                "all": torch.arange(graph.num_nodes, device=device)}[input_kind]
    loader = NeighborLoader(graph, [3, 2], input_nodes=inputs, batch_size=7, x=x, y=y,
                            node_data={"train_mask": train}, seed=0)
    batches = list(loader)
    assert len(batches) == len(loader) == -(-expected.numel() // 7)
    seeds = torch.cat([b.n_id[: b.batch_size] for b in batches])
    assert torch.equal(seeds, expected)  # no shuffle: input order
    assert torch.equal(torch.cat([b.input_id for b in batches]), torch.arange(expected.numel(), device=device))
    for batch in batches:
        check_batch(graph, batch, x, y, train)
        assert batch.num_sampled_nodes[0] == batch.batch_size


def test_neighbor_loader_shuffle_and_drop_last():
    graph = make_graph_case("unsorted")
    loader = NeighborLoader(graph, [2], batch_size=8, shuffle=True, drop_last=True, seed=0)
    assert len(loader) == 50 // 8
    epochs = [torch.cat([b.n_id[: b.batch_size] for b in loader]) for _ in range(2)]
    assert all(e.numel() == 48 and e.unique().numel() == 48 for e in epochs)
    assert not torch.equal(epochs[0], epochs[1])  # a new order every epoch
    assert not torch.equal(epochs[0], torch.arange(48))
    again = NeighborLoader(graph, [2], batch_size=8, shuffle=True, drop_last=True, seed=0)
    first = [b for b in again]
    assert torch.equal(torch.cat([b.n_id[: b.batch_size] for b in first]), epochs[0])
    assert all(b.batch_size == 8 for b in first)


def test_neighbor_loader_is_reproducible_by_seed(device):
    graph = make_graph_case("hub", device)

    def run(seed):
        loader = NeighborLoader(graph, [4, 3], batch_size=16, shuffle=True, seed=seed)
        return [(b.n_id, b.edge_index, b.e_id) for b in loader]

    a, b, c = run(5), run(5), run(6)
    assert all(all(torch.equal(u, v) for u, v in zip(p, q)) for p, q in zip(a, b))
    assert not all(torch.equal(p[0], q[0]) for p, q in zip(a, c))


@pytest.mark.parametrize("loader", ["neighbor", "saint"])
def test_loaders_without_a_seed_follow_torch_manual_seed(loader, device):
    """seed=None drew a fresh OS seed, so torch.manual_seed did not reproduce the batches (PyG's loaders follow
    torch's global generator)."""
    graph = make_graph_case("hub", device)

    def run(global_seed):
        torch.manual_seed(global_seed)
        batches = (NeighborLoader(graph, [4, 3], batch_size=16, shuffle=True) if loader == "neighbor"
                   else SaintLoader(graph, SaintRandomWalkSampler(10, 2), num_steps=3))
        return [b.n_id for b in batches]

    a, b, c = run(1), run(1), run(2)
    assert all(torch.equal(p, q) for p, q in zip(a, b, strict=True))
    assert not all(p.shape == q.shape and torch.equal(p, q) for p, q in zip(a, c))


@pytest.mark.parametrize("subgraph_type", ["directional", "bidirectional", "induced"])
@pytest.mark.parametrize("disjoint", [False, True])
@pytest.mark.parametrize("replace", [False, True])
def test_neighbor_batches_are_target_sorted(subgraph_type, disjoint, replace, device):
    """NeighborLoader hands its batch graph a CSR without sorting (the sampled edges come by target): it must
    be the CSR that sorting builds, for every subgraph type, also with repeated seeds."""
    graph = make_graph_case("hub", device)
    w = torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(0)).to(device)
    graph = graphfuse.Graph(graph.edge_index, num_nodes=graph.num_nodes, edge_weight=w)
    loader = NeighborLoader(graph, [3, -1], input_nodes=torch.tensor([0, 5, 5, 9, 0], device=device),
                            batch_size=5, replace=replace, subgraph_type=subgraph_type, disjoint=disjoint, seed=1)
    batch = next(iter(loader))
    assert batch.graph.num_edges > 0
    rebuilt = graphfuse.Graph(batch.edge_index, num_nodes=batch.num_nodes, edge_weight=batch.graph.edge_weight)
    for got, want in zip(batch.graph.csr, rebuilt.csr):
        assert torch.equal(got, want)


def test_neighbor_loader_disjoint_and_to_pyg():
    graph = make_graph_case("hub")
    x, y, train = node_data(graph)
    loader = NeighborLoader(graph, [2, 2], batch_size=4, disjoint=True, x=x, y=y, node_data={"train_mask": train},
                            seed=0)
    batch = next(iter(loader))
    assert batch.batch[:4].tolist() == [0, 1, 2, 3]
    data = batch.to_pyg()
    assert torch.equal(data.edge_index, batch.edge_index) and torch.equal(data.x, batch.x)
    assert torch.equal(data.batch, batch.batch) and torch.equal(data.n_id, batch.n_id)
    assert data.batch_size == 4 and data.num_nodes == batch.num_nodes
    assert data.num_sampled_nodes == list(batch.num_sampled_nodes)
    assert torch.equal(data.train_mask, batch.train_mask)


def test_batch_to_moves_everything():
    graph = make_graph_case("hub")
    x, y, train = node_data(graph)
    batch = next(iter(NeighborLoader(graph, [2], batch_size=4, x=x, y=y, node_data={"train_mask": train})))
    moved = batch.to("cpu")
    assert torch.equal(moved.x, batch.x) and moved.num_sampled_nodes == batch.num_sampled_nodes
    with pytest.raises(AttributeError, match="val_mask"):
        _ = batch.val_mask


def test_loader_argument_checks():
    graph = make_graph_case("hub")
    with pytest.raises(ValueError, match="x must be a tensor with 300 rows"):
        NeighborLoader(graph, [2], x=torch.ones(5, 2))
    with pytest.raises(ValueError, match="batch_size"):
        NeighborLoader(graph, [2], batch_size=0)
    with pytest.raises(ValueError, match="input_nodes mask"):
        NeighborLoader(graph, [2], input_nodes=torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"NeighborLoader: input_nodes must be node ids in \[0, 300\)"):
        NeighborLoader(graph, [2], input_nodes=torch.tensor([0, 300]))
    # review: an integer 0/1 mask was read as ids (seeds 0 and 1, over and over); wrong types raise TypeError
    with pytest.raises(ValueError, match="300 ids, all 0 or 1: a 0/1 mask given as integers"):
        NeighborLoader(graph, [2], input_nodes=(torch.arange(300) % 2))
    for bad in (torch.ones(3), [0, 1]):
        with pytest.raises(TypeError, match="input_nodes must be a bool mask or an int64/int32 tensor"):
            NeighborLoader(graph, [2], input_nodes=bad)
    with pytest.raises(ValueError, match="train_mask"):
        SaintLoader(graph, SaintNodeSampler(5), norm="paper")
    with pytest.raises(ValueError, match="num_steps"):
        SaintLoader(graph, SaintNodeSampler(5), num_steps=0)
    with pytest.raises(TypeError, match="GraphSAINT sampler"):
        SaintLoader(graph, object())


def test_switches_samplers_and_node_data_are_checked():
    """String switches were truthy (replace='no' sampled with replacement), a sampler class passed the draw test
    and failed when called, and node_data could overwrite x and y or be a list (AttributeError)."""
    graph = make_graph_case("hub")
    with pytest.raises(TypeError, match="NeighborSampler: replace must be a bool; got 'no'"):
        NeighborLoader(graph, [2], replace="no")
    with pytest.raises(TypeError, match="NeighborSampler: disjoint must be a bool"):
        NeighborLoader(graph, [2], disjoint=1)
    with pytest.raises(TypeError, match="NeighborLoader: shuffle must be a bool"):
        NeighborLoader(graph, [2], shuffle="false")
    with pytest.raises(TypeError, match="NeighborLoader: drop_last must be a bool"):
        NeighborLoader(graph, [2], drop_last=None)
    with pytest.raises(TypeError, match="SaintLoader: normalize_edges must be a bool"):
        SaintLoader(graph, SaintNodeSampler(5), normalize_edges="no")
    for bad in (SaintNodeSampler, "node"):
        with pytest.raises(TypeError, match="SaintLoader: sampler must be a GraphSAINT sampler instance"):
            SaintLoader(graph, bad)
        with pytest.raises(TypeError, match="compute_saint_norm: sampler must be a GraphSAINT sampler instance"):
            compute_saint_norm(graph, bad, sample_coverage=1)
        with pytest.raises(TypeError, match="count_saint_samples: sampler must be a GraphSAINT sampler instance"):
            count_saint_samples(graph, bad, 1)
    x, y, _ = node_data(graph)
    with pytest.raises(ValueError, match=r"SaintLoader: node_data must not hold \['x'\]"):
        SaintLoader(graph, SaintNodeSampler(5), x=x, node_data={"x": x + 7})
    with pytest.raises(ValueError, match=r"NeighborLoader: node_data must not hold \['y'\]"):
        NeighborLoader(graph, [2], node_data={"y": y})
    with pytest.raises(TypeError, match="SaintLoader: node_data must be None or a mapping"):
        SaintLoader(graph, SaintNodeSampler(5), node_data=[x])


@pytest.mark.parametrize("bad", [None, "50", float("inf"), float("nan"), -1])
def test_saint_loader_names_a_bad_sample_coverage(bad):
    """None or a str failed on '<' with a bare TypeError; inf passed every check and raised an OverflowError from
    math.ceil in the pre-sampling; NaN passed the loader's check."""
    with pytest.raises(ValueError, match="sample_coverage must be a finite number"):
        SaintLoader(make_graph_case("hub"), SaintNodeSampler(5), sample_coverage=bad)
    with pytest.raises(ValueError, match="sample_coverage must be a finite number > 0"):
        count_saint_samples(make_graph_case("hub"), SaintNodeSampler(5), bad)


@pytest.mark.parametrize("bad", [2, None])
def test_neighbor_loader_names_num_neighbors_that_is_not_a_sequence(bad):
    """The loader called tuple() on it first: a bare TypeError "'int' object is not iterable"."""
    with pytest.raises(TypeError, match="num_neighbors must be a sequence of ints"):
        NeighborLoader(make_graph_case("hub"), bad)
    assert NeighborLoader(make_graph_case("hub"), [3, -1]).sampler.num_neighbors == (3, -1)


@pytest.mark.parametrize("bad", [1.5, "0", True, 2**64, -2**63 - 1])
def test_loaders_name_a_bad_seed(bad):
    """A float seed failed inside torch with a RuntimeError, 2**64 with an 'Overflow' ValueError naming nothing,
    and True seeded as 1."""
    graph = make_graph_case("hub")
    for make in (lambda: NeighborLoader(graph, [2], seed=bad), lambda: SaintLoader(graph, SaintNodeSampler(5), seed=bad)):
        with pytest.raises(ValueError, match=r"Loader: seed must be None or an int in \[-2\*\*63, 2\*\*64\)"):
            make()


def test_numpy_sample_coverage_is_accepted():
    """NumPy numbers (e.g. read from an array of settings) passed the earlier '<' checks and must still pass."""
    np = pytest.importorskip("numpy")
    graph = make_graph_case("hub")
    assert SaintLoader(graph, SaintNodeSampler(5), sample_coverage=np.float32(0)).saint_norm is None
    counts = [count_saint_samples(graph, SaintNodeSampler(5), coverage, torch.Generator().manual_seed(0))
              for coverage in (np.int64(2), 2)]
    for got, expected in zip(*counts, strict=True):
        assert torch.equal(torch.as_tensor(got), torch.as_tensor(expected))


def test_explicit_train_mask_reaches_the_batches():
    """train_mask= only chose 'paper' sampling: batches had no train_mask, so a loss scored every node."""
    graph = make_graph_case("hub")
    mask = torch.zeros(graph.num_nodes, dtype=torch.bool)
    mask[::3] = True
    batch = next(iter(SaintLoader(graph, SaintNodeSampler(5), train_mask=mask, seed=0)))
    assert torch.equal(batch.train_mask, mask[batch.n_id])
    with pytest.raises(ValueError, match="different tensors; give the mask once"):
        SaintLoader(graph, SaintNodeSampler(5), train_mask=mask, node_data={"train_mask": mask.clone()})


@pytest.mark.parametrize("source", ["train_mask=", "node_data"])
def test_a_train_mask_of_the_wrong_kind_is_refused_in_pyg_mode_too(source):
    """With norm='pyg' a NumPy or list mask was dropped (batches had no train_mask) and an int 0/1 mask was
    carried as is, so out[batch.train_mask] picked rows 0 and 1 (review)."""
    graph = make_graph_case("hub")
    good = torch.zeros(graph.num_nodes, dtype=torch.bool)
    for bad, error, match in ((good.numpy(), TypeError, "train_mask must be a torch.Tensor; got ndarray"),
                              (good.tolist(), TypeError, "train_mask must be a torch.Tensor; got list"),
                              (good.long(), ValueError, rf"train_mask must be a \({graph.num_nodes},\) bool tensor")):
        kwargs = {"train_mask": bad} if source == "train_mask=" else {"node_data": {"train_mask": bad}}
        with pytest.raises(error, match=f"SaintLoader: {match}"):
            SaintLoader(graph, SaintNodeSampler(5), **kwargs)


@pytest.mark.parametrize("name", ["batch", "n_id", "batch_size", "edge_index", "num_nodes", "to_pyg"])
def test_node_data_names_taken_by_the_batch_are_refused(name):
    """They were shadowed: batch.<name> returned the Batch's own field, and to_pyg() overwrote the real one."""
    graph = make_graph_case("hub")
    with pytest.raises(ValueError, match=f"node_data names \\['{name}'\\] are taken by the batch itself"):
        NeighborLoader(graph, [2], node_data={name: torch.zeros(graph.num_nodes)})


def test_paper_mode_without_training_edges_and_an_empty_graph_say_so():
    """The node and edge samplers said 'the graph has no edges' of a graph that has them (the training subgraph
    had none), and only at the first batch when there was no pre-sampling; an empty graph failed on num_samples."""
    graph = make_graph_case("hub")
    lonely = torch.zeros(graph.num_nodes, dtype=torch.bool)
    src, dst = graph.edge_index
    looped = set(src[src == dst].tolist())
    lonely[next(v for v in range(graph.num_nodes) if v not in looped)] = True  # one node, no edge among them
    for sampler in (SaintNodeSampler(5), SaintEdgeSampler(5)):
        with pytest.raises(ValueError, match="the training subgraph .* has no edges for the saint_"):
            SaintLoader(graph, sampler, norm="paper", train_mask=lonely, sample_coverage=0)
    assert SaintLoader(graph, SaintRandomWalkSampler(2, 1), norm="paper", train_mask=lonely, sample_coverage=0)
    with pytest.raises(ValueError, match="count_saint_samples: the graph has no nodes to sample"):
        count_saint_samples(graphfuse.Graph(torch.zeros(2, 0, dtype=torch.long), num_nodes=0), SaintRandomWalkSampler(1, 1),
                            2, torch.Generator().manual_seed(0))


@pytest.mark.parametrize("coverage", [0, 2])
def test_an_edgeless_graph_is_refused_for_the_edge_drawing_samplers_without_a_warning(coverage):
    """The node and edge samplers warned that every node could never be drawn, then raised in the presampling (or
    at the first batch without one); random walks start at every node, so they still run."""
    graph = make_graph_case("no_edges")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for sampler in (SaintNodeSampler(5), SaintEdgeSampler(5)):
            with pytest.raises(ValueError, match=f"SaintLoader: the graph has no edges for the {sampler.name} sam"):
                SaintLoader(graph, sampler, sample_coverage=coverage)
        batch = next(iter(SaintLoader(graph, SaintRandomWalkSampler(2, 1), sample_coverage=coverage)))
    assert batch.graph.num_edges == 0 and batch.batch_size > 0


def test_training_nodes_the_sampler_can_never_draw_are_warned_about():
    """Found by review: the node and edge samplers keep only endpoints of drawn edges, so under norm='paper' the
    training nodes isolated in the training subgraph (109 of Cora's 140) were never in a batch, silently."""
    # 0 → 1 → 2 between training nodes; 3 and 4 are training nodes whose edges lead to node 5 (not training)
    edges = torch.tensor([[0, 1, 3, 5, 4], [1, 2, 5, 3, 5]])
    graph = graphfuse.Graph(edges, num_nodes=6)
    train = torch.tensor([True, True, True, True, True, False])
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(6, 3, generator=gen), torch.randint(0, 2, (6,), generator=gen)
    cases = [  # sampler, norm, the warning's start (None: no warning)
        (SaintNodeSampler(budget=4), "paper", "3 of 5 training nodes can never be drawn by the saint_node sampler"),
        (SaintEdgeSampler(budget=4), "paper", "2 of 5 training nodes can never be drawn by the saint_edge sampler"),
        (SaintRandomWalkSampler(2, 1), "paper", None),
        (SaintNodeSampler(budget=4), "pyg", "1 of 5 training nodes can never be drawn by the saint_node sampler"),
        (SaintEdgeSampler(budget=4), "pyg", None),
        # without a training mask every node counts, and the warning says nodes (it said training nodes)
        (SaintNodeSampler(budget=4), "no mask", "1 of 6 nodes can never be drawn by the saint_node sampler"),
    ]
    for sampler, norm, message in cases:
        mask = None if norm == "no mask" else train
        make = lambda: SaintLoader(graph, sampler, num_steps=1, norm="pyg" if mask is None else norm,  # noqa: E731
                                   x=x, y=y, train_mask=mask, sample_coverage=0)
        if message is None:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                make()
        else:
            with pytest.warns(UserWarning, match=message):
                make()
    # what the warning says: those nodes are never drawn
    drawn = set()
    with pytest.warns(UserWarning):
        loader = SaintLoader(graph, SaintNodeSampler(budget=4), num_steps=200, norm="paper", x=x, y=y,
                             train_mask=train, sample_coverage=0, seed=0)
    for batch in loader:
        drawn |= set(batch.n_id.tolist())
    assert drawn == {0, 1}
    # a node outside the training set that can never be drawn is not counted (mutation audit)
    only_outside = graphfuse.Graph(torch.tensor([[0, 1, 2, 3, 4], [1, 2, 0, 5, 5]]), num_nodes=6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SaintLoader(only_outside, SaintNodeSampler(budget=4), num_steps=1, norm="pyg", x=x, y=y, train_mask=train,
                    sample_coverage=0)


def test_sampler_objects_and_cache_dir_are_checked_where_they_are_taken():
    """Found by review: a duck sampler without name or __call__ failed later with AttributeError/TypeError, a
    non-path cache_dir with pathlib's message, draw(num_samples=-1) in torch, and compute_saint_norm named the
    sampler's graph, not the training subgraph, for norm='paper' on training nodes sharing no edge."""
    graph = make_graph_case("unsorted")

    class Duck:
        def draw(self, graph, num_samples, generator=None):
            return torch.zeros(num_samples, 2, dtype=torch.int64)

    for call in (lambda: SaintLoader(graph, Duck(), num_steps=1), lambda: compute_saint_norm(graph, Duck(), sample_coverage=1)):
        with pytest.raises(TypeError, match=r"sampler must be a GraphSAINT sampler instance \(a dataclass with a str name"):
            call()
    for call in (lambda: SaintLoader(graph, SaintNodeSampler(budget=4), num_steps=1, cache_dir=3),
                 lambda: compute_saint_norm(graph, SaintNodeSampler(budget=4), sample_coverage=1, cache_dir=3)):
        with pytest.raises(TypeError, match="cache_dir must be None, a str or a path; got int"):
            call()
    for sampler in (SaintNodeSampler(budget=4), SaintEdgeSampler(budget=4), SaintRandomWalkSampler(2, 1)):
        for bad in (-1, 2.5, "3"):
            with pytest.raises(ValueError, match=f"{type(sampler).__name__}: num_samples must be an int ≥ 0"):
                sampler.draw(graph, bad)
        assert sampler.draw(graph, 0).shape[0] == 0
    lonely = torch.zeros(graph.num_nodes, dtype=torch.bool)
    lonely[graph.edge_index[0, 0]] = True  # one training node: no edge between training nodes
    with pytest.raises(ValueError, match="compute_saint_norm: norm='paper' samples from the training subgraph"):
        compute_saint_norm(graph, SaintNodeSampler(budget=4), sample_coverage=1, norm="paper", train_mask=lonely)


def _full_batch() -> Batch:
    graph = graphfuse.Graph(torch.tensor([[1, 2, 0], [0, 0, 1]]), num_nodes=3, edge_weight=torch.tensor([0.5, 1.0, 2.0]))
    return Batch(graph=graph, n_id=torch.tensor([7, 3, 9]), e_id=torch.tensor([4, 0, 2]), x=torch.randn(3, 2),
                 y=torch.tensor([1, 0, 1]), node_data={"train_mask": torch.tensor([True, False, True])},
                 batch_size=2, node_norm=torch.tensor([0.1, 0.2, 0.3]), edge_norm=torch.tensor([1.0, 2.0, 3.0]),
                 num_sampled_nodes=(2, 1), num_sampled_edges=(3,), batch=torch.tensor([0, 1, 0]),
                 input_id=torch.tensor([5, 6]))


def test_batch_to_moves_every_tensor():
    """Every tensor field, the graph (edges and weights) and node_data's values: found by review to have been
    checked for six named fields only."""
    batch = _full_batch()
    moved = batch.to("meta")
    checked = 0
    for f in dataclasses.fields(Batch):
        value = getattr(moved, f.name)
        tensors = ([value] if isinstance(value, torch.Tensor) else
                   [value.edge_index, value.edge_weight] if isinstance(value, graphfuse.Graph) else
                   list(value.values()) if isinstance(value, dict) else [])
        for t in tensors:
            assert t is None or t.device.type == "meta", f.name
            checked += t is not None
    assert checked >= 11  # n_id, e_id, x, y, batch, input_id, the norms, the graph's two tensors, node_data's


def test_to_pyg_keeps_edge_weights():
    batch = _full_batch()
    data = batch.to_pyg()
    assert torch.equal(data.edge_weight, batch.graph.edge_weight)


def test_a_cache_dir_that_is_a_file_is_refused_before_sampling(tmp_path):
    graph = make_graph_case("duplicates")
    blocker = tmp_path / "file"
    blocker.write_text("")
    for cache_dir in (blocker, blocker / "below"):
        with pytest.raises(ValueError, match=f"SaintLoader: cache_dir must be a folder .*; {blocker} is a file"):
            SaintLoader(graph, SaintRandomWalkSampler(10, 2), sample_coverage=5, cache_dir=cache_dir)
        with pytest.raises(ValueError, match=f"compute_saint_norm: cache_dir must be a folder .*; {blocker} is"):
            compute_saint_norm(graph, SaintRandomWalkSampler(10, 2), sample_coverage=5, cache_dir=cache_dir)
    SaintLoader(graph, SaintRandomWalkSampler(10, 2), sample_coverage=1, cache_dir=tmp_path / "new" / "folder")


def test_input_id_needs_one_entry_per_seed():
    loader = NeighborLoader(make_graph_case("duplicates"), [2], batch_size=2)
    with pytest.raises(ValueError, match=r"input_id must have one entry per seed, shape \(2,\); got \(1,\)"):
        loader.sample(torch.tensor([0, 1]), torch.tensor([7]))


def test_argument_types_get_type_errors():
    import numpy as np

    graph = make_graph_case("duplicates")
    with pytest.raises(TypeError, match="NeighborLoader: x must be a torch.Tensor; got ndarray"):
        NeighborLoader(graph, [2], x=np.ones((graph.num_nodes, 2)))
    with pytest.raises(TypeError, match="NeighborSampler: num_neighbors must be a sequence of ints .*got '15,10'"):
        NeighborLoader(graph, "15,10")


def test_batch_to_keeps_every_field():
    """A moved batch is the same batch: its seeds count (batch_size: the rows the loss is taken over), per-hop
    counts and every tensor."""
    batch = _full_batch()
    moved = batch.to("cpu")
    for f in dataclasses.fields(Batch):
        a, b = getattr(batch, f.name), getattr(moved, f.name)
        if isinstance(a, torch.Tensor):
            assert torch.equal(a, b), f.name
        elif isinstance(a, graphfuse.Graph):
            assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.edge_weight, b.edge_weight)
        elif f.name == "node_data":
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        else:
            assert a == b, f.name
    assert moved.to_pyg().num_sampled_edges == [3] and moved.to_pyg().batch_size == 2


def test_the_normalisation_is_pre_sampled_from_the_loaders_own_seed():
    """Loaders of two seeds estimate their coefficients from independent pre-samplings (presampling_seed of their
    seed, as documented), so runs of different seeds do not share one estimate's error."""
    graph = make_graph_case("hub")
    sampler = SaintRandomWalkSampler(8, 2)
    loaders = {seed: SaintLoader(graph, sampler, sample_coverage=3, seed=seed) for seed in (5, 6)}
    for seed, loader in loaders.items():
        expected = compute_saint_norm(graph, sampler, sample_coverage=3, seed=presampling_seed(seed))
        assert torch.equal(loader.saint_norm.node_count, expected.node_count)
        assert torch.equal(loader.saint_norm.edge_norm, expected.edge_norm)
    assert not torch.equal(loaders[5].saint_norm.node_count, loaders[6].saint_norm.node_count)
    # seeds torch reads as one (modulo 2**64) draw the same batches, and now pre-sample the same normalisation
    assert presampling_seed(-1) == presampling_seed(2**64 - 1) != presampling_seed(1)
