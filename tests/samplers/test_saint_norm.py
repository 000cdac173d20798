"""GraphSAINT normalisation: the formulas of both conventions, exact counting, the coverage rule, the cache."""

from __future__ import annotations

import dataclasses
import itertools
import logging
from pathlib import Path
from typing import ClassVar

import pytest
import torch

import graphfuse
import graphfuse.samplers.saint_norm as saint_norm_module
from cases import make_graph_case
from graphfuse.samplers import (
    SaintRandomWalkSampler,
    compute_saint_norm,
    count_saint_samples,
    graph_fingerprint,
    saint_norm_from_counts,
    tensor_fingerprint,
    training_subgraph,
)


def triangle_with_tail() -> graphfuse.Graph:
    """Undirected 0-1, 1-2, 2-0, 2-3 stored in both directions (e0..e7), and node 4 isolated."""
    pairs = [(0, 1), (1, 2), (2, 0), (2, 3)]
    edges = [p for a, b in pairs for p in ((a, b), (b, a))]
    return graphfuse.Graph(torch.tensor(edges).t(), num_nodes=5)


@dataclasses.dataclass(frozen=True)
class ListSampler:
    """Cycles through fixed node lists (padded by repetition), whatever the generator."""

    sets: tuple[tuple[int, ...], ...]
    name: ClassVar[str] = "list"

    def draw(self, graph, num_samples, generator=None):
        width = max(len(s) for s in self.sets)
        start = self._calls[0]
        rows = [list(self.sets[(start + i) % len(self.sets)]) for i in range(num_samples)]
        self._calls[0] += num_samples
        return torch.tensor([r + [r[0]] * (width - len(r)) for r in rows], device=graph.device)

    @property
    def _calls(self):
        if "_counter" not in self.__dict__:
            object.__setattr__(self, "_counter", [0])
        return self.__dict__["_counter"]


def test_counts_and_the_coverage_rule_are_exact(device):
    graph = triangle_with_tail().to(device)
    sampler = ListSampler(((0, 1, 2), (2, 3), (1,), (4, 0)))
    # sizes 3, 2, 1, 2, 3, ... ; target 5 · 2 = 10 → 3+2+1+2+3 = 11 ≥ 10 after the 5th subgraph
    node_count, edge_count, num_samples = count_saint_samples(graph, sampler, 2, None)
    assert num_samples == 5
    assert node_count.tolist() == [3, 3, 3, 1, 1]
    edges = graph.edge_index.t().tolist()
    sets = [(0, 1, 2), (2, 3), (1,), (4, 0), (0, 1, 2)]
    expected = [sum(a in s and b in s for s in sets) for a, b in edges]
    assert edge_count.tolist() == expected


def test_pyg_formulas_by_hand():
    graph = triangle_with_tail()
    node_count = torch.tensor([4, 2, 0, 1, 0])
    edge_count = torch.tensor([2, 2, 0, 0, 0, 0, 0, 0])  # e0 = 0→1, e1 = 1→0 seen twice
    sn = saint_norm_from_counts(graph, node_count, edge_count, 10, "pyg")
    assert sn.node_norm.tolist() == pytest.approx([10 / 4 / 5, 10 / 2 / 5, 10 / 0.1 / 5, 10 / 1 / 5, 10 / 0.1 / 5])
    # e0: C_src=4 / 2; e1: C_src=2 / 2; e2 = 1→2: 2/0 → clamp 1e4; e3 = 2→1: 0/0 → 0.1; e6 = 2→3: 0.1; e7 = 3→2: 1e4
    assert sn.edge_norm.tolist() == pytest.approx([2.0, 1.0, 1e4, 0.1, 0.1, 1e4, 0.1, 1e4])
    assert sn.node_norm.dtype == sn.edge_norm.dtype == torch.float32


def test_paper_formulas_by_hand():
    graph = triangle_with_tail()
    train = torch.tensor([True, True, False, True, False])
    node_count = torch.tensor([4, 2, 0, 0, 0])
    edge_count = torch.tensor([2, 2, 0, 0, 0, 0, 0, 0])
    sn = saint_norm_from_counts(graph, node_count, edge_count, 10, "paper", train)
    # loss norm over training nodes: M / (C_v · |V_train|), C_v = 0 → 0.1; zero elsewhere
    assert sn.node_norm.tolist() == pytest.approx([10 / 4 / 3, 10 / 2 / 3, 0, 10 / 0.1 / 3, 0])
    # aggregation norm uses the target's count: e0 = 0→1: C_1/C_e = 1, e1 = 1→0: 4/2; non-training edges 0
    assert sn.edge_norm.tolist() == pytest.approx([1.0, 2.0, 0, 0, 0, 0, 0, 0])


def test_pyg_norm_is_the_paper_norm_of_the_reverse_edge():
    graph = triangle_with_tail()
    gen = torch.Generator().manual_seed(0)
    counts = count_saint_samples(graph, SaintRandomWalkSampler(roots=1, walk_length=2), 30, gen)
    pyg = saint_norm_from_counts(graph, *counts, "pyg")
    paper = saint_norm_from_counts(graph, *counts, "paper", torch.ones(5, dtype=torch.bool))
    reverse = torch.arange(8) ^ 1  # e_{2k} and e_{2k+1} are each other's reverse
    assert torch.equal(pyg.edge_norm, paper.edge_norm[reverse])
    assert torch.allclose(pyg.node_norm, paper.node_norm)


def test_count_invariants_on_a_random_walk_sampler(device):
    graph = make_graph_case("hub", device)
    gen = torch.Generator(device=device).manual_seed(0)
    sampler = SaintRandomWalkSampler(roots=10, walk_length=2)
    node_count, edge_count, m = count_saint_samples(graph, sampler, 5, gen)
    target = graph.num_nodes * 5
    total = int(node_count.sum())
    assert total >= target and total - 10 * 3 < target  # stops at the first subgraph reaching the coverage
    assert int(node_count.max()) <= m
    src, dst = graph.edge_index
    assert bool((edge_count <= torch.minimum(node_count[src], node_count[dst])).all())
    assert int(edge_count.sum()) > 0


def test_paper_norm_samples_the_training_graph_only(device):
    graph = make_graph_case("unsorted", device)
    train = torch.zeros(graph.num_nodes, dtype=torch.bool, device=device)
    train[::2] = True
    sn = compute_saint_norm(graph, SaintRandomWalkSampler(roots=4, walk_length=2), sample_coverage=20,
                            norm="paper", train_mask=train)
    assert int(sn.node_count[~train].sum()) == 0
    src, dst = graph.edge_index
    inside = train[src] & train[dst]
    assert int(sn.edge_count[~inside].sum()) == 0 and int(sn.edge_count[inside].sum()) > 0
    assert int(sn.node_count.sum()) >= 20 * int(train.sum())
    assert bool((sn.node_norm[~train] == 0).all()) and bool((sn.node_norm[train] > 0).all())
    sub_graph, sub = training_subgraph(graph, train)
    assert sub.n_id.tolist() == train.nonzero().view(-1).tolist()
    assert sub_graph.num_nodes == int(train.sum()) and sub_graph.num_edges == int(inside.sum())


def test_cache_hit_skips_pre_sampling(tmp_path, monkeypatch, device):
    graph = make_graph_case("hub", device)
    sampler = SaintRandomWalkSampler(roots=8, walk_length=2)
    first = compute_saint_norm(graph, sampler, sample_coverage=5, seed=3, cache_dir=tmp_path)
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].name.startswith("saint_rw_pyg_")

    def fail(*args, **kwargs):
        raise AssertionError("pre-sampled although the coefficients are cached")

    monkeypatch.setattr(saint_norm_module, "count_saint_samples", fail)
    second = compute_saint_norm(graph, sampler, sample_coverage=5, seed=3, cache_dir=tmp_path)
    for f in dataclasses.fields(first):
        a, b = getattr(first, f.name), getattr(second, f.name)
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b
    assert second.node_norm.device == graph.device
    for changed in ({"seed": 4}, {"sample_coverage": 6}, {"norm": "paper", "train_mask": graph.in_degree > 1}):
        with pytest.raises(AssertionError, match="pre-sampled"):
            compute_saint_norm(graph, sampler, **{"sample_coverage": 5, "seed": 3, **changed}, cache_dir=tmp_path)
    with pytest.raises(AssertionError, match="pre-sampled"):
        compute_saint_norm(graph, SaintRandomWalkSampler(roots=8, walk_length=3), sample_coverage=5, seed=3,
                           cache_dir=tmp_path)
    with pytest.raises(AssertionError, match="pre-sampled"):
        compute_saint_norm(make_graph_case("hub", device, seed=1), sampler, sample_coverage=5, seed=3,
                           cache_dir=tmp_path)
    monkeypatch.undo()  # norm='paper' with another training mask (mutation audit: the key ignored the mask)
    first = graph.in_degree > 1
    other = first.clone()
    other[first.nonzero()[0]] = False
    compute_saint_norm(graph, sampler, sample_coverage=5, norm="paper", train_mask=first, cache_dir=tmp_path)
    sn = compute_saint_norm(graph, sampler, sample_coverage=5, norm="paper", train_mask=other, cache_dir=tmp_path)
    assert bool((sn.node_norm[~other] == 0).all())


@pytest.mark.parametrize("damage", ["garbage", "other_key", "other_version", "short"])
def test_a_damaged_or_foreign_cache_file_is_computed_again(tmp_path, caplog, damage):
    """An unreadable file failed every later run until deleted by hand; a file written for other settings
    (another key, an older CACHE_VERSION, or the wrong number of coefficients) was returned as is."""
    graph = make_graph_case("hub")
    sampler = SaintRandomWalkSampler(roots=8, walk_length=2)
    want = compute_saint_norm(graph, sampler, sample_coverage=5, seed=3, cache_dir=tmp_path)
    (path,) = tmp_path.iterdir()
    stored = torch.load(path, weights_only=True)
    if damage == "garbage":
        path.write_bytes(b"not a torch file")
    elif damage == "other_key":
        torch.save({**stored, "key": stored["key"].replace('"seed": 3', '"seed": 4')}, path)
    elif damage == "other_version":
        version = f'"version": {saint_norm_module.CACHE_VERSION}'
        assert version in stored["key"]
        torch.save({**stored, "key": stored["key"].replace(version, '"version": 0')}, path)
    else:
        torch.save({**stored, "node_norm": stored["node_norm"][:-1]}, path)
    with caplog.at_level(logging.WARNING, logger=saint_norm_module.__name__):
        got = compute_saint_norm(graph, sampler, sample_coverage=5, seed=3, cache_dir=tmp_path)
    assert "ignoring" in caplog.text
    assert torch.equal(got.node_norm, want.node_norm) and torch.equal(got.edge_norm, want.edge_norm)
    assert [f.name for f in tmp_path.iterdir()] == [path.name]  # rewritten, no temporary file left
    assert torch.equal(torch.load(path, weights_only=True)["node_norm"], want.node_norm)


def test_the_cache_key_holds_the_version(tmp_path, monkeypatch):
    graph = make_graph_case("hub")
    sampler = SaintRandomWalkSampler(roots=8, walk_length=2)
    compute_saint_norm(graph, sampler, sample_coverage=2, seed=3, cache_dir=tmp_path)
    monkeypatch.setattr(saint_norm_module, "CACHE_VERSION", saint_norm_module.CACHE_VERSION + 1)
    compute_saint_norm(graph, sampler, sample_coverage=2, seed=3, cache_dir=tmp_path)
    assert len(list(tmp_path.iterdir())) == 2


def test_a_failed_cache_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    graph = make_graph_case("hub")

    def fail(obj, f):
        Path(f).write_bytes(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(saint_norm_module.torch, "save", fail)
    with pytest.raises(OSError, match="disk full"):
        compute_saint_norm(graph, SaintRandomWalkSampler(roots=8, walk_length=2), sample_coverage=2,
                           cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_cache_dir_inside_the_mirror_is_refused(tmp_path, monkeypatch):
    """The coefficients are written under cache_dir; the offline mirror is only read. cache_dir equal to it or
    inside it (also through '..' or '~') is refused before pre-sampling or writing; a sibling folder is not."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    monkeypatch.setenv("GRAPHFUSE_DATA_MIRROR", str(mirror))
    monkeypatch.setenv("HOME", str(tmp_path))
    graph = make_graph_case("hub", "cpu")
    sampler = SaintRandomWalkSampler(roots=8, walk_length=2)
    for cache_dir in (mirror, mirror / "saint_norm", tmp_path / "x" / ".." / "mirror" / "a", "~/mirror/b"):
        with pytest.raises(ValueError, match=r"compute_saint_norm: cache_dir=.* lies inside \$GRAPHFUSE_DATA_MIRROR"):
            compute_saint_norm(graph, sampler, sample_coverage=2, cache_dir=cache_dir)
    assert list(mirror.iterdir()) == []
    compute_saint_norm(graph, sampler, sample_coverage=2, cache_dir=tmp_path / "mirror2")
    assert len(list((tmp_path / "mirror2").iterdir())) == 1


def test_same_seed_same_coefficients(device):
    graph = make_graph_case("isolated", device)
    sampler = SaintRandomWalkSampler(roots=3, walk_length=2)
    a = compute_saint_norm(graph, sampler, sample_coverage=10, seed=7)
    b = compute_saint_norm(graph, sampler, sample_coverage=10, seed=7)
    c = compute_saint_norm(graph, sampler, sample_coverage=10, seed=8)
    assert torch.equal(a.node_count, b.node_count) and torch.equal(a.edge_norm, b.edge_norm)
    assert not torch.equal(a.node_count, c.node_count)


def test_fingerprints():
    a = torch.tensor([[0, 1, 2], [1, 2, 0]])
    assert tensor_fingerprint(a) == tensor_fingerprint(a.clone())
    assert tensor_fingerprint(a) != tensor_fingerprint(a.flip(1))
    assert tensor_fingerprint(a) != tensor_fingerprint(a.view(3, 2))
    b = a.clone()
    b[1, 2] = 1
    assert tensor_fingerprint(a) != tensor_fingerprint(b)
    big = torch.randint(0, 1 << 40, (3 << 20,), generator=torch.Generator().manual_seed(0))
    changed = big.clone()
    changed[-1] += 1
    assert tensor_fingerprint(big) != tensor_fingerprint(changed)
    g = graphfuse.Graph(a, num_nodes=3)
    assert graph_fingerprint(g) != graph_fingerprint(graphfuse.Graph(a, num_nodes=4))
    with pytest.raises(TypeError, match="integer"):
        tensor_fingerprint(torch.ones(3))


def test_fingerprints_of_tensors_with_equal_moments_differ():
    # The previous fingerprint summed squares of linear forms of (value, position): tensors sharing the sums of
    # their values, squared values and value-position products collided, e.g. these masks (two training nodes
    # each, index sums 3) and these edge lists.
    a, b = torch.tensor([True, False, False, True]), torch.tensor([False, True, True, False])
    assert tensor_fingerprint(a) != tensor_fingerprint(b)
    g1 = graphfuse.Graph(torch.tensor([[0, 1, 1, 0], [1, 2, 3, 4]]), num_nodes=5)
    g2 = graphfuse.Graph(torch.tensor([[1, 0, 0, 1], [1, 2, 3, 4]]), num_nodes=5)
    assert graph_fingerprint(g1) != graph_fingerprint(g2)
    generator = torch.Generator().manual_seed(0)
    masks = []
    for _ in range(100):  # one training node moved up by one, another down by one: same count and index sum
        mask = torch.rand(1000, generator=generator) < 0.5
        up = int(torch.nonzero(mask[:-1] & ~mask[1:])[0])
        down = int(torch.nonzero(~mask[:-1] & mask[1:])[-1]) + 1
        moved = mask.clone()
        moved[[up, up + 1, down - 1, down]] = torch.tensor([False, True, True, False])
        masks += [mask, moved]
    assert len({tensor_fingerprint(m) for m in masks}) == len({tuple(m.tolist()) for m in masks}) == 200


def test_paper_norm_of_a_second_mask_on_the_same_graph():
    # The training subgraph is cached on the graph under the mask's fingerprint: a mask that collided with an
    # earlier one got the earlier one's subgraph (its nodes counted, the new mask's left at zero).
    graph = graphfuse.Graph(torch.tensor([[0, 1, 2, 3, 1, 2, 3, 0], [1, 2, 3, 0, 0, 1, 2, 3]]), num_nodes=4)
    sampler = SaintRandomWalkSampler(roots=1, walk_length=1)
    for mask in (torch.tensor([True, False, False, True]), torch.tensor([False, True, True, False])):
        sn = compute_saint_norm(graph, sampler, sample_coverage=5, norm="paper", train_mask=mask)
        assert int(sn.node_count[~mask].sum()) == 0 and bool((sn.node_count[mask] > 0).all())


def test_fingerprints_of_values_far_apart_differ():
    p = (1 << 31) - 1
    pairs = [([0, 5], [p, 5]), ([-1], [p - 1]), ([7], [7 + 2 * p]), ([3], [3 - p]), ([0], [p << 31]),
             ([1 << 40], [(1 << 40) + p]), ([-(1 << 63)], [(1 << 63) - 1]), ([0], [1 << 60])]
    for a, b in pairs:
        assert tensor_fingerprint(torch.tensor(a)) != tensor_fingerprint(torch.tensor(b)), (a, b)
    values = [0, 1, -1, p - 1, p, p + 1, 2 * p, -p, 1 << 30, 1 << 33, 1 << 60, 1 << 62, -(1 << 63), (1 << 63) - 1]
    grid = torch.tensor(values)
    grid_pairs = torch.cartesian_prod(grid, grid)  # all distinct: so must be their fingerprints
    assert len({tensor_fingerprint(pair) for pair in grid_pairs}) == len(values) ** 2
    assert tensor_fingerprint(grid_pairs) == tensor_fingerprint(torch.tensor(grid_pairs.tolist()))


def test_fingerprint_bool_and_integer_dtypes():
    mask = torch.arange(10) % 3 == 0
    assert tensor_fingerprint(mask) == tensor_fingerprint(mask.clone())
    flipped = mask.clone()
    flipped[4] = True
    assert tensor_fingerprint(mask) != tensor_fingerprint(flipped)
    fingerprints = {tensor_fingerprint(mask.to(dtype)) for dtype in (torch.bool, torch.uint8, torch.int8,
                                                                      torch.int16, torch.int32, torch.int64)}
    assert len(fingerprints) == 6  # same values, the dtype tells them apart
    small = torch.tensor([-3, 0, 100], dtype=torch.int8)
    assert tensor_fingerprint(small) == tensor_fingerprint(torch.tensor([-3, 0, 100], dtype=torch.int8))
    assert len(tensor_fingerprint(small)) == 32


def test_paper_train_mask_is_checked_before_the_cache(tmp_path):
    graph = triangle_with_tail()
    sampler = SaintRandomWalkSampler(roots=2, walk_length=1)
    for mask in (torch.ones(5), torch.ones(5, dtype=torch.long), torch.ones(4, dtype=torch.bool)):
        for cache_dir in (None, tmp_path):
            with pytest.raises(ValueError, match=r"compute_saint_norm: train_mask must be a \(5,\) bool tensor"):
                compute_saint_norm(graph, sampler, sample_coverage=1, norm="paper", train_mask=mask,
                                   cache_dir=cache_dir)
    with pytest.raises(TypeError, match="compute_saint_norm: train_mask must be a torch.Tensor"):
        compute_saint_norm(graph, sampler, sample_coverage=1, norm="paper", train_mask=[True] * 5,
                           cache_dir=tmp_path)
    assert not any(tmp_path.iterdir())
    train = torch.tensor([True, True, True, False, False])
    sn = compute_saint_norm(graph, sampler, sample_coverage=1, norm="paper", train_mask=train, cache_dir=tmp_path)
    assert len(list(tmp_path.iterdir())) == 1 and int(sn.node_count[~train].sum()) == 0


def test_argument_checks():
    graph = make_graph_case("hub")
    sampler = SaintRandomWalkSampler(roots=2, walk_length=1)
    with pytest.raises(ValueError, match="norm must be one of"):
        compute_saint_norm(graph, sampler, sample_coverage=1, norm="gcn")
    with pytest.raises(ValueError, match="train_mask"):
        compute_saint_norm(graph, sampler, sample_coverage=1, norm="paper")
    with pytest.raises(ValueError, match="sample_coverage"):
        count_saint_samples(graph, sampler, 0)
    with pytest.raises(ValueError, match="train_mask must be"):
        training_subgraph(graph, torch.ones(3, dtype=torch.bool))


def test_bad_arguments_are_named_before_any_work(tmp_path):
    # With a cache_dir, None or 'x' coverages failed in float() (TypeError / a ValueError naming nothing); a None
    # seed failed in manual_seed; chunk_size=0 ran as 1; lists failed with AttributeErrors; wrong count shapes
    # with IndexErrors.
    graph = triangle_with_tail()
    sampler = SaintRandomWalkSampler(roots=2, walk_length=1)
    for coverage in (None, "x", 0, float("nan")):
        with pytest.raises(ValueError, match="compute_saint_norm: sample_coverage must be a finite number > 0"):
            compute_saint_norm(graph, sampler, sample_coverage=coverage, cache_dir=tmp_path)
    for seed in (None, 1.5, True, 2**64):
        with pytest.raises(ValueError, match=r"compute_saint_norm: seed must be an int in \[-2\*\*63, 2\*\*64\)"):
            compute_saint_norm(graph, sampler, sample_coverage=1, seed=seed, cache_dir=tmp_path)
    assert not any(tmp_path.iterdir())
    for chunk_size in (0, -1, 2.0):
        with pytest.raises(ValueError, match="count_saint_samples: chunk_size must be None or an int ≥ 1"):
            count_saint_samples(graph, sampler, 1, chunk_size=chunk_size)
    with pytest.raises(TypeError, match="training_subgraph: train_mask must be a torch.Tensor; got list"):
        training_subgraph(graph, [True] * 5)
    with pytest.raises(TypeError, match="train_mask must be a torch.Tensor; got list"):
        graphfuse.samplers.SaintLoader(graph, sampler, norm="paper", train_mask=[True] * 5)
    counts = (torch.zeros(5, dtype=torch.long), torch.zeros(8, dtype=torch.long))
    for node_count, edge_count, name in ((counts[0][:4], counts[1], "node_count"), (counts[0], [0] * 8, "edge_count")):
        with pytest.raises(ValueError, match=rf"saint_norm_from_counts: {name} must be a"):
            saint_norm_from_counts(graph, node_count, edge_count, 1)


def test_train_masks_and_sample_counts_are_checked():
    """An all-False paper mask gave all-zero coefficients from zero samples; an int mask failed in torch.where,
    a (1, N) mask with an IndexError; a negative or zero num_samples gave negative or zero node norms."""
    graph = triangle_with_tail()
    sampler = SaintRandomWalkSampler(roots=2, walk_length=1)
    none = torch.zeros(5, dtype=torch.bool)
    with pytest.raises(ValueError, match="compute_saint_norm: train_mask selects no node"):
        compute_saint_norm(graph, sampler, sample_coverage=1, norm="paper", train_mask=none)
    with pytest.raises(ValueError, match="SaintLoader: .*train_mask selects no node|training_subgraph: train_mask selects"):
        graphfuse.samplers.SaintLoader(graph, sampler, norm="paper", train_mask=none)
    counts = (torch.ones(5, dtype=torch.long), torch.ones(8, dtype=torch.long))
    for mask in (torch.ones(5, dtype=torch.long), torch.ones(1, 5, dtype=torch.bool), none):
        with pytest.raises(ValueError, match="saint_norm_from_counts: train_mask"):
            saint_norm_from_counts(graph, *counts, 3, "paper", mask)
    with pytest.raises(TypeError, match="saint_norm_from_counts: train_mask must be a torch.Tensor"):
        saint_norm_from_counts(graph, *counts, 3, "paper", [True] * 5)
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="saint_norm_from_counts: num_samples must be an int ≥ 1"):
            saint_norm_from_counts(graph, *counts, bad)
    # counts that no M samples give (negative, or above M) made negative or meaningless norms (review)
    for node_count, edge_count, name, got in ((counts[0] - 2, counts[1], "node_count", "[-1, -1]"),
                                              (counts[0], counts[1] * 4, "edge_count", "[4, 4]")):
        with pytest.raises(ValueError, match=rf"saint_norm_from_counts: {name} must lie in \[0, num_samples=3\] "
                                             rf".*got values in \{got[:-1]}\]"):
            saint_norm_from_counts(graph, node_count, edge_count, 3)


def test_popcount_matches_python():
    from graphfuse.samplers.saint_norm import popcount

    values = torch.randint(0, 1 << 62, (1000,), generator=torch.Generator().manual_seed(0)) * 2 + 1
    values = torch.cat([values, torch.tensor([0, 1, (1 << 63) - 1, 1 << 62])])
    assert popcount(values).tolist() == [(v).bit_count() for v in values.tolist()]


@pytest.mark.parametrize("chunk_size", [1, 7, 63, 100])
def test_bitmask_and_candidate_counting_agree(chunk_size, device):
    graph = make_graph_case("duplicates", device)
    sampler = SaintRandomWalkSampler(roots=2, walk_length=2)
    results = [
        count_saint_samples(graph, sampler, 40, torch.Generator(device=device).manual_seed(5), method=method,
                            chunk_size=chunk_size)
        for method in ("candidates", "bitmask")
    ]
    (nc_a, ec_a, m_a), (nc_b, ec_b, m_b) = results
    assert m_a == m_b and torch.equal(nc_a, nc_b) and torch.equal(ec_a, ec_b)
    assert int(ec_a.sum()) > 0


def test_float64_counts_of_the_caller_are_not_changed():
    """``.double()`` of a float64 tensor is the tensor itself: its never-sampled nodes were set to 0.1 in place."""
    graph = make_graph_case("hub")
    node_count = torch.zeros(graph.num_nodes, dtype=torch.float64)
    node_count[:3] = 2.0
    edge_count = torch.ones(graph.num_edges, dtype=torch.float64)
    before = node_count.clone()
    graphfuse.samplers.saint_norm_from_counts(graph, node_count, edge_count, 4)
    assert torch.equal(node_count, before)


SETS = ((0, 1, 2), (2, 3), (1,), (4, 0))  # sizes 3, 2, 1, 2, then again: running totals 3, 5, 6, 8, 11, 13, ...


@pytest.mark.parametrize("chunk_size", [None, 1, 3, 64])
@pytest.mark.parametrize("coverage", [2, 1.2, 1.6, 1.7, 2.1, 0.5, 3.3])
def test_presampling_stops_at_the_first_subgraph_reaching_the_coverage(coverage, chunk_size):
    """M is the first number of subgraphs with Σ |V_sub| ≥ N · coverage, for a coverage N · coverage is not an
    integer of (1.7: 8.5 needs the 5th subgraph, not the 4th) and one the running total reaches exactly (1.2: 6 is
    reached by the 3rd; a 4th would be one too many), whatever the chunking."""
    graph = triangle_with_tail()
    node_count, edge_count, m = count_saint_samples(graph, ListSampler(SETS), coverage, None, chunk_size=chunk_size)
    total = expected = 0
    drawn = []
    for nodes in itertools.cycle(SETS):  # the rule of the module docstring, step by step
        if total >= graph.num_nodes * coverage:
            break
        total, expected = total + len(set(nodes)), expected + 1
        drawn.append(set(nodes))
    assert m == expected
    assert node_count.tolist() == [sum(v in s for s in drawn) for v in range(graph.num_nodes)]
    assert edge_count.tolist() == [sum(a in s and b in s for s in drawn) for a, b in graph.edge_index.t().tolist()]


def test_coefficients_use_exactly_the_subgraphs_of_the_coverage_rule():
    """The normalisation's M is the number of subgraphs the coverage rule stops at (node_norm = M / (C_v · N))."""
    graph = triangle_with_tail()
    sn = compute_saint_norm(graph, ListSampler(SETS), sample_coverage=1.2)  # totals 3, 5, 6: M = 3
    assert sn.num_samples == 3
    assert sn.node_count.tolist() == [1, 2, 2, 1, 0]
    assert sn.node_norm.tolist() == pytest.approx([3 / 1 / 5, 3 / 2 / 5, 3 / 2 / 5, 3 / 1 / 5, 3 / 0.1 / 5])


def test_graph_fingerprints_tell_bipartite_sizes_apart():
    """A fingerprint covers the graph's sizes: bipartite graphs with the same edge list and num_src but another
    num_dst are other graphs."""
    edge_index = torch.tensor([[0, 1, 2], [1, 0, 1]])
    sizes = ((3, 2), (3, 3), (3, 4), (4, 2))
    fingerprints = {graph_fingerprint(graphfuse.Graph(edge_index, num_src=s, num_dst=d)) for s, d in sizes}
    assert len(fingerprints) == len(sizes)


def test_fingerprints_hash_every_element_of_tensors_longer_than_a_chunk():
    """Tensors are hashed in host chunks of 2**24 elements (a 100M-node training mask spans several): a change at
    either side of a chunk boundary, or in the last element, changes the fingerprint."""
    from graphfuse.samplers.fingerprint import _CHUNK, tensor_fingerprint

    mask = torch.zeros(_CHUNK + 3, dtype=torch.bool)
    fingerprints = {tensor_fingerprint(mask)}
    for position in (0, _CHUNK - 1, _CHUNK, _CHUNK + 2):
        changed = mask.clone()
        changed[position] = True
        fingerprints.add(tensor_fingerprint(changed))
    assert len(fingerprints) == 5
