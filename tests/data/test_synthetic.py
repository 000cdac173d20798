"""The synthetic RMAT dataset: determinism, sizes, structure, homophily and feature signal."""

from __future__ import annotations

import pytest
import torch

from graphfuse.data import load_dataset
from graphfuse.data.seeds import check_seed

SMALL = {"num_nodes": 3000, "avg_degree": 8, "num_features": 32, "num_classes": 6}


def _load(**options):
    return load_dataset("synthetic", **{**SMALL, **options})


def _edge_homophily(ds):
    src, dst = ds.edge_index
    return (ds.y[src] == ds.y[dst]).double().mean().item()


@pytest.fixture(scope="module")
def syn():
    return _load(seed=3)


def test_deterministic_by_seed(syn):
    again = _load(seed=3)
    for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(again, key), getattr(syn, key)), key
    other = _load(seed=4)
    assert not torch.equal(other.y, syn.y)
    assert other.num_edges != syn.num_edges or not torch.equal(other.edge_index, syn.edge_index)


def test_sizes_and_ranges(syn):
    assert (syn.name, syn.num_nodes, syn.num_features, syn.num_classes) == ("synthetic", 3000, 32, 6)
    assert syn.num_edges == 3000 * 8
    assert syn.x.dtype == torch.float32 and syn.y.dtype == torch.int64 and syn.edge_index.dtype == torch.int64
    assert int(syn.edge_index.min()) >= 0 and int(syn.edge_index.max()) < 3000
    assert torch.bincount(syn.y).tolist() == [500] * 6
    assert syn.ogb_name is None


def test_symmetric_simple_graph(syn):
    src, dst = syn.edge_index
    assert not (src == dst).any()
    keys = src * syn.num_nodes + dst
    assert torch.equal(keys, torch.unique(keys))
    assert torch.equal(torch.sort(dst * syn.num_nodes + src).values, keys)


def test_degree_skew(syn):
    degree = torch.bincount(syn.edge_index[0], minlength=syn.num_nodes).float()
    assert degree.max() > 8 * degree.mean()


def test_split(syn):
    masks = torch.stack([syn.train_mask, syn.val_mask, syn.test_mask])
    assert torch.equal(masks.sum(0), torch.ones(syn.num_nodes, dtype=torch.long))
    assert masks.sum(1).tolist() == [1800, 600, 600]


def test_features_carry_the_class(syn):
    train, test = syn.train_mask, syn.test_mask
    centroids = torch.stack([syn.x[train & (syn.y == c)].mean(0) for c in range(syn.num_classes)])
    accuracy = (torch.cdist(syn.x[test], centroids).argmin(1) == syn.y[test]).float().mean().item()
    assert accuracy > 3 / syn.num_classes
    separable = _load(seed=3, feature_noise=0.0)
    assert torch.equal(separable.x[separable.y == 0], separable.x[separable.y == 0][:1].expand(500, -1))


@pytest.mark.parametrize("homophily", [0.0, 0.1, 0.5, 0.8, 1.0])
def test_homophily_is_met(homophily):
    ds = _load(homophily=homophily, seed=1)
    assert ds.num_edges == 3000 * 8
    assert _edge_homophily(ds) == pytest.approx(homophily, abs=1e-3)


def test_dense_graph_fills_edges():
    ds = load_dataset("synthetic", num_nodes=8, avg_degree=7, num_classes=2, homophily=1.0)
    assert ds.num_edges == 8 * 7
    assert 0 < _edge_homophily(ds) < 1


def test_graph_too_dense_for_its_classes_still_has_the_requested_edges():
    # 50 classes of 8 nodes hold 50 * 28 = 1400 same-class pairs, fewer than the 2400 edges asked for: the
    # same-class kind kept finding a few of its last pairs each round, never stalled, and the graph ended with
    # those 1,372 edges only (E = 2744, not 4800)
    ds = load_dataset("synthetic", num_nodes=400, avg_degree=12, num_features=4, num_classes=50, homophily=1.0)
    assert ds.num_edges == 400 * 12
    assert 0.5 < _edge_homophily(ds) <= 1400 / 2400
    src, dst = ds.edge_index
    keys = src * 400 + dst
    assert not (src == dst).any() and torch.equal(keys, torch.unique(keys))


def test_defaults():
    ds = load_dataset("synthetic")
    assert (ds.num_nodes, ds.num_edges, ds.num_features, ds.num_classes) == (10_000, 100_000, 64, 8)
    assert _edge_homophily(ds) == pytest.approx(0.8, abs=1e-3)


def test_on_device(device):
    ds = _load(seed=5, device=device)
    assert all(t.device.type == device.type for t in (ds.x, ds.y, ds.edge_index, ds.train_mask))
    assert torch.equal(_load(seed=5, device=device).edge_index, ds.edge_index)


@pytest.mark.parametrize("options, argument", [
    ({"num_nodes": 0}, "num_nodes"), ({"num_classes": 0}, "num_classes"), ({"num_features": 0}, "num_features"),
    ({"avg_degree": 5000}, "avg_degree"), ({"homophily": 1.5}, "homophily"),
    ({"rmat": (0.5, 0.2, 0.2, 0.2)}, "rmat"), ({"feature_noise": -1.0}, "feature_noise"),
    # wrong types and non-finite values: these failed with bare TypeErrors ("'<=' not supported ..."), a
    # RuntimeError from manual_seed, or went through (NaN rmat; infinite noise gave non-finite features)
    ({"avg_degree": "8"}, "avg_degree"), ({"homophily": None}, "homophily"), ({"num_nodes": True}, "num_nodes"),
    ({"seed": 1.5}, "seed"), ({"seed": "0"}, "seed"), ({"seed": 2**64}, "seed"), ({"rmat": None}, "rmat"),
    ({"rmat": (0.25, 0.25, float("nan"), 0.5)}, "rmat"), ({"feature_noise": float("inf")}, "feature_noise"),
    ({"feature_noise": None}, "feature_noise"),
])
def test_invalid_options(options, argument):
    with pytest.raises(ValueError, match=f"synthetic: {argument} must be"):
        _load(**options)


def test_rmat_graph_is_symmetric_deduplicated_and_seeded():
    from graphfuse.data.synthetic import rmat_graph

    ei = rmat_graph(10, 5_000, seed=3)
    n = 1 << 10
    key = ei[0] * n + ei[1]
    assert ei.dtype == torch.int64 and int(ei.min()) >= 0 and int(ei.max()) < n
    assert bool((key.diff() > 0).all())  # sorted by (source, target), no duplicates
    reverse = torch.sort(ei[1] * n + ei[0]).values
    assert torch.equal(reverse, key)  # every edge has its reverse
    assert ei.size(1) <= 2 * 5_000
    assert torch.equal(rmat_graph(10, 5_000, seed=3), ei)
    assert not torch.equal(rmat_graph(10, 5_000, seed=4), ei)


def test_rmat_may_be_any_sequence_of_four_numbers():
    """An array or an omegaconf ListConfig of probabilities built the graph before the type check (6cb17bb)."""
    np = pytest.importorskip("numpy")
    omegaconf = pytest.importorskip("omegaconf")
    probs = (0.5, 0.2, 0.2, 0.1)
    options = {"num_nodes": 200, "avg_degree": 4, "num_features": 3, "num_classes": 2}
    expected = load_dataset("synthetic", rmat=probs, **options)
    for rmat in (np.array(probs), omegaconf.OmegaConf.create({"rmat": list(probs)}).rmat):
        assert torch.equal(load_dataset("synthetic", rmat=rmat, **options).edge_index, expected.edge_index)


def test_numpy_seed_builds_the_same_dataset():
    """The option check accepts NumPy integer seeds; torch.Generator.manual_seed does not, so the seed is passed
    on as an int (before, a NumPy seed passed the check and then raised a TypeError inside torch)."""
    np = pytest.importorskip("numpy")
    options = {"num_nodes": 200, "avg_degree": 4, "num_features": 3, "num_classes": 2}
    expected = load_dataset("synthetic", seed=3, **options)
    got = load_dataset("synthetic", seed=np.int64(3), **options)
    assert torch.equal(got.edge_index, expected.edge_index) and torch.equal(got.x, expected.x)


@pytest.mark.parametrize("device, message", [("foo", "device must be a torch device"), (1.5, "device must be a torch"),
                                             ("cuda:99", "visible CUDA device")])
def test_a_bad_device_is_named(device, message):
    """The device was used unchecked: 'foo' and a missing GPU failed inside torch with RuntimeErrors."""
    with pytest.raises(ValueError, match=f"synthetic: .*{message}"):
        load_dataset("synthetic", num_nodes=20, device=device)


def test_features_are_float32_under_a_float64_default_dtype():
    """The features were drawn in torch's default dtype: under float64 the loader failed NodeDataset's check."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        ds = load_dataset("synthetic", num_nodes=100, avg_degree=3, num_features=8, num_classes=2)
    finally:
        torch.set_default_dtype(previous)
    assert ds.x.dtype == torch.float32


def test_one_class_per_node_is_accepted():
    """num_classes may be as large as num_nodes (documented range [1, num_nodes]; mutant DA1 refused the upper
    end). Every node is then its own class, and no edge can join two nodes of one class."""
    ds = load_dataset("synthetic", num_nodes=12, num_classes=12, avg_degree=2, num_features=4, seed=1)
    assert sorted(ds.y.tolist()) == list(range(12)) and ds.num_classes == 12
    src, dst = ds.edge_index
    assert ds.num_edges > 0 and not (ds.y[src] == ds.y[dst]).any()


def test_the_lowest_torch_seed_is_accepted():
    """torch.Generator.manual_seed takes [-2**63, 2**64): -2**63 included (mutant DA8 refused it)."""
    check_seed("synthetic", -2**63)
    a = load_dataset("synthetic", num_nodes=30, num_classes=3, avg_degree=4, num_features=4, seed=-2**63)
    b = load_dataset("synthetic", num_nodes=30, num_classes=3, avg_degree=4, num_features=4, seed=-2**63)
    assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x)
