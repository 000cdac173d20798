"""load_dataset's registry, option checking, paths and the feature normalisation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from graphfuse.data import (
    DATASETS,
    DatasetNotFoundError,
    NodeDataset,
    dataset_options,
    default_root,
    load_dataset,
    normalize_features,
    register_dataset,
)
from graphfuse.data.registry import resolve_loader


def _tiny(name: str = "tiny") -> NodeDataset:
    n = 4
    return NodeDataset(
        name=name, x=torch.ones(n, 3), y=torch.tensor([0, 1, 0, 1]),
        edge_index=torch.tensor([[0, 1, 2], [1, 2, 3]]), train_mask=torch.tensor([True, True, False, False]),
        val_mask=torch.tensor([False, False, True, False]), test_mask=torch.tensor([False, False, False, True]),
        num_classes=2,
    )


def test_registered_names():
    assert {"cora", "facebook", "synthetic", "ogbn-*"} <= set(DATASETS)


def test_unknown_name_lists_registered_names():
    with pytest.raises(ValueError, match="unknown dataset name 'citeseer'") as info:
        load_dataset("citeseer")
    for name in ("cora", "facebook", "synthetic", "ogbn-*"):
        assert name in str(info.value)


@pytest.mark.parametrize("args, message", [
    ((None,), "name must be a str; got None"), ((3,), "name must be a str; got 3"),
    (("cora", 5), "root must be a path .*; got 5"),
])
def test_bad_name_or_root_type_is_named(args, message):
    # were "AttributeError: 'NoneType' object has no attribute 'lower'" and a TypeError naming neither
    with pytest.raises(TypeError, match=message):
        load_dataset(*args)


def test_unknown_option_names_the_valid_ones(tmp_path):
    with pytest.raises(TypeError, match="'num_node'") as info:
        load_dataset("synthetic", tmp_path, num_node=10)
    for option in ("num_nodes", "avg_degree", "num_features", "num_classes", "homophily", "seed", "device"):
        assert option in str(info.value)
    with pytest.raises(TypeError, match="'num_nodes'.*valid options: download=True"):
        load_dataset("cora", tmp_path, num_nodes=10)


def test_options_are_per_dataset():
    assert dataset_options("synthetic")["num_nodes"] == 10_000
    assert dataset_options("synthetic")["homophily"] == 0.8
    assert set(dataset_options("ogbn-arxiv")) == {"download", "to_undirected"}
    assert set(dataset_options("CORA")) == {"download"}


def test_register_exact_and_prefix(monkeypatch, tmp_path):
    monkeypatch.setattr("graphfuse.data.registry.DATASETS", dict(DATASETS))
    seen = {}

    @register_dataset("toy-*")
    def load_toy(name, root, *, size=2):
        seen.update(name=name, root=root, size=size)
        return _tiny(name)

    ds = load_dataset("Toy-Small", tmp_path, size=5)
    assert seen == {"name": "toy-small", "root": tmp_path, "size": 5}
    assert ds.name == "toy-small"
    assert resolve_loader("toy-x") is load_toy
    with pytest.raises(ValueError, match="unknown dataset name 'toy'"):
        resolve_loader("toy")
    with pytest.raises(ValueError, match="already registered"):
        register_dataset("toy-*")(load_toy)


def test_load_dataset_normalizes_features(monkeypatch, tmp_path):
    monkeypatch.setattr("graphfuse.data.registry.DATASETS", dict(DATASETS))
    register_dataset("tiny")(lambda name, root: _tiny(name))
    assert torch.equal(load_dataset("tiny", tmp_path).x, torch.ones(4, 3))
    torch.testing.assert_close(load_dataset("tiny", tmp_path, normalize_features=True).x,
                               torch.full((4, 3), 1 / 3))


def test_default_root(monkeypatch, tmp_path):
    monkeypatch.setenv("GRAPHFUSE_DATA_ROOT", str(tmp_path / "data"))
    assert default_root() == tmp_path / "data"
    monkeypatch.delenv("GRAPHFUSE_DATA_ROOT")
    assert default_root() == Path.home() / ".cache" / "graphfuse" / "datasets"


def test_dataset_not_found_error():
    err = DatasetNotFoundError("missing /x/y", "/x/y")
    assert isinstance(err, FileNotFoundError)
    assert err.path == Path("/x/y")
    assert str(err) == "missing /x/y"


def test_normalize_features_rows_sum_to_one():
    x = torch.tensor([[1.0, 3.0, 0.0], [0.0, 0.0, 0.0], [0.2, 0.1, 0.1], [0.0, 0.0, 5.0]])
    out = normalize_features(x.clone())
    torch.testing.assert_close(out, torch.tensor([[0.25, 0.75, 0.0], [0.0, 0.0, 0.0], [0.5, 0.25, 0.25],
                                                  [0.0, 0.0, 1.0]]))


def test_normalize_features_matches_pyg_on_binary_features():
    from torch_geometric.data import Data
    from torch_geometric.transforms import NormalizeFeatures

    x = (torch.rand(50, 20, generator=torch.Generator().manual_seed(0)) < 0.2).float()
    x[3] = 0
    expected = NormalizeFeatures()(Data(x=x.clone())).x
    out = normalize_features(x.clone())
    torch.testing.assert_close(out, expected)
    assert out[3].abs().sum() == 0
    nonzero = x.sum(1) > 0
    torch.testing.assert_close(out[nonzero].sum(1), torch.ones(int(nonzero.sum())))


def test_normalize_features_shifts_negative_features():
    x = torch.tensor([[-1.0, 1.0], [0.0, 1.0]])
    torch.testing.assert_close(normalize_features(x), torch.tensor([[0.0, 1.0], [1 / 3, 2 / 3]]))


def test_node_dataset_properties_and_pyg():
    ds = _tiny()
    assert (ds.num_nodes, ds.num_features, ds.num_edges) == (4, 3, 3)
    data = ds.to_pyg()
    assert data.num_nodes == 4 and torch.equal(data.edge_index, ds.edge_index)
    assert torch.equal(data.train_mask, ds.train_mask) and torch.equal(data.y, ds.y)
    assert ds.to("cpu").x.data_ptr() == ds.x.data_ptr()


def test_node_dataset_validates_shapes():
    ds = _tiny()
    with pytest.raises(ValueError, match="y must be a \\(4,\\) int64"):
        NodeDataset(**{**ds.__dict__, "y": torch.zeros(3, dtype=torch.long)})
    with pytest.raises(ValueError, match="x must be a \\(N, F\\) float32"):
        NodeDataset(**{**ds.__dict__, "x": torch.ones(4, 3, dtype=torch.float64)})
    with pytest.raises(ValueError, match="test_mask must be"):
        NodeDataset(**{**ds.__dict__, "test_mask": torch.zeros(4, dtype=torch.long)})


def test_interrupted_mirror_copy_leaves_no_partial_file(monkeypatch, tmp_path):
    from graphfuse.data import paths

    mirror = tmp_path / "mirror" / "set"
    mirror.mkdir(parents=True)
    for f in ("a", "b"):
        (mirror / f).write_bytes(f.encode() * 1000)
    monkeypatch.setenv("GRAPHFUSE_DATA_MIRROR", str(tmp_path / "mirror"))
    copyfile = paths.shutil.copyfile

    def cut_short(src, dst):  # the process is stopped (or the disk fills) halfway through the first file
        Path(dst).write_bytes(Path(src).read_bytes()[:10])
        raise OSError("No space left on device")

    monkeypatch.setattr(paths.shutil, "copyfile", cut_short)
    dest = tmp_path / "root" / "set"
    with pytest.raises(OSError, match="No space left"):
        paths.copy_from_mirror("set", dest, ["a", "b"])
    monkeypatch.setattr(paths.shutil, "copyfile", copyfile)
    assert paths.copy_from_mirror("set", dest, ["a", "b"])
    for f in ("a", "b"):
        assert (dest / f).read_bytes() == (mirror / f).read_bytes()
    assert sorted(p.name for p in dest.iterdir()) == ["a", "b"]


def test_a_root_inside_the_mirror_is_refused(tmp_path, monkeypatch):
    """Loaders write raw copies and processed files below their root; the mirror is only read. A root equal to
    the mirror, inside it (also through '..' or the GRAPHFUSE_DATA_ROOT default) is refused before any write;
    a sibling folder whose name starts like the mirror's is not inside it."""
    mirror = tmp_path / "mirror"
    (mirror / "planetoid").mkdir(parents=True)
    monkeypatch.setenv("GRAPHFUSE_DATA_MIRROR", str(mirror))
    options = {"num_nodes": 50, "avg_degree": 3, "num_features": 2, "num_classes": 2}
    for root in (mirror, mirror / "x", tmp_path / "other" / ".." / "mirror" / "planetoid"):
        with pytest.raises(ValueError, match="lies inside \\$GRAPHFUSE_DATA_MIRROR"):
            load_dataset("synthetic", root, **options)
    monkeypatch.setenv("GRAPHFUSE_DATA_ROOT", str(mirror / "cache"))
    with pytest.raises(ValueError, match="lies inside"):
        load_dataset("synthetic", **options)
    assert load_dataset("synthetic", tmp_path / "mirror2", **options).num_nodes == 50
    assert sorted(p.name for p in mirror.rglob("*")) == ["planetoid"]


@pytest.mark.parametrize("name, option", [("synthetic", "normalize_features"), ("cora", "download"),
                                          ("facebook", "download"), ("cora", "normalize_features")])
def test_yes_no_options_must_be_bools(tmp_path, name, option):
    """"no" is a truthy string: download="no" went on to download, normalize_features="no" normalised."""
    with pytest.raises(TypeError, match=f"load_dataset: {option} must be True or False for dataset '{name}'; got 'no'"):
        load_dataset(name, tmp_path, **{option: "no"})
    assert not any(tmp_path.iterdir())
