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
    registry,
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


def test_node_dataset_validates_its_documented_invariants():
    """Found by review: a custom loader's overlapping split (test nodes trained on), labels past num_classes and
    out-of-range edge ids were accepted."""
    ds = _tiny()
    fields = ds.__dict__
    everyone = torch.ones(4, dtype=torch.bool)
    cases = [
        ({"test_mask": fields["train_mask"] | fields["test_mask"]}, "train_mask and test_mask must be disjoint"),
        ({"val_mask": everyone, "train_mask": ~everyone, "test_mask": ~everyone, "y": torch.tensor([0, 1, -1, 0])},
         "val_mask holds 1 unlabelled nodes"),
        ({"y": torch.tensor([0, 1, 5, 0])}, r"y must lie in \[0, num_classes=2\) or be -1"),
        ({"y": torch.tensor([0, 1, -3, 0])}, r"got \[-3, 1\]"),
        ({"edge_index": torch.tensor([[0, 4], [1, 2]])}, r"edge_index ids must lie in \[0, N=4\)"),
        ({"edge_index": torch.tensor([[0, -1], [1, 2]])}, "edge_index ids"),
        ({"num_classes": 0}, "num_classes must be an int >= 1"),
        ({"num_classes": 2.0}, "num_classes must be an int >= 1"),
    ]
    for change, match in cases:
        with pytest.raises(ValueError, match=match):
            NodeDataset(**{**fields, **change})
    unlabelled_outside = torch.tensor([0, 1, -1, 0])
    ok = NodeDataset(**{**fields, "y": unlabelled_outside, "train_mask": torch.tensor([True, True, False, False]),
                        "val_mask": ~everyone, "test_mask": torch.tensor([False, False, False, True])})
    assert ok.num_nodes == 4


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


def test_a_mirror_copy_replaces_a_partial_file(monkeypatch, tmp_path):
    """A file of another size than the mirror's (left by an interrupted download) was kept forever."""
    from graphfuse.data import paths

    (tmp_path / "mirror" / "set").mkdir(parents=True)
    (tmp_path / "mirror" / "set" / "a").write_bytes(b"a" * 1000)
    monkeypatch.setenv("GRAPHFUSE_DATA_MIRROR", str(tmp_path / "mirror"))
    dest = tmp_path / "root" / "set"
    dest.mkdir(parents=True)
    (dest / "a").write_bytes(b"a" * 10)
    assert paths.copy_from_mirror("set", dest, ["a"])
    assert (dest / "a").read_bytes() == b"a" * 1000


def test_download_drops_a_stale_archive_and_a_bad_one(monkeypatch, tmp_path):
    """PyG's download_url returns an archive already on disk without fetching: a truncated one from an
    interrupted download failed every later load with 'File is not a zip file'."""
    import torch_geometric.data as pyg_data

    from graphfuse.data import paths

    url = "https://example.org/data/set.zip?x=1"
    (tmp_path / "set.zip").write_bytes(b"truncated")
    fetched = []

    def download_url(u, folder, log=True):
        assert not (Path(folder) / "set.zip").exists(), "the stale archive was not removed"
        (Path(folder) / "set.zip").write_bytes(b"not a zip either")
        fetched.append(u)
        return str(Path(folder) / "set.zip")

    monkeypatch.setattr(pyg_data, "download_url", download_url)
    with pytest.raises(Exception, match="zip"):
        paths.download_and_extract(url, tmp_path)
    assert fetched == [url] and not (tmp_path / "set.zip").exists()


def test_loads_sharing_a_root_take_turns(tmp_path):
    """Parallel seeds loading Cora into a fresh root read processed files another process was writing."""
    import threading
    import time

    from graphfuse.data import paths

    entered = threading.Event()

    def other():
        with paths.locked(tmp_path / "planetoid"):
            entered.set()

    with paths.locked(tmp_path / "planetoid"):
        thread = threading.Thread(target=other)
        thread.start()
        time.sleep(0.3)
        assert not entered.is_set()
    thread.join(5)
    assert entered.is_set()


def test_a_dataset_folder_linked_into_the_mirror_is_refused(monkeypatch, tmp_path):
    """Only the root was checked: root/planetoid/Cora as a link into the mirror got processed files written
    into the mirror."""
    mirror = tmp_path / "mirror"
    (mirror / "planetoid" / "Cora").mkdir(parents=True)
    monkeypatch.setenv("GRAPHFUSE_DATA_MIRROR", str(mirror))
    root = tmp_path / "root"
    (root / "planetoid").mkdir(parents=True)
    (root / "planetoid" / "Cora").symlink_to(mirror / "planetoid" / "Cora")
    (root / "facebook").symlink_to(mirror / "planetoid")
    for name in ("cora", "facebook"):
        with pytest.raises(ValueError, match=f"{name}: dataset folder=.* lies inside"):
            load_dataset(name, root, download=False)
    assert sorted(p.name for p in mirror.rglob("*")) == ["Cora", "planetoid"]


def test_unreadable_cora_raw_files_name_the_folder(no_mirror, tmp_path):
    """Truncated raw files (no processed files yet) raised a bare UnpicklingError: a traceback, exit 1."""
    raw = tmp_path / "planetoid" / "Cora" / "raw"
    raw.mkdir(parents=True)
    for suffix in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index"):
        (raw / f"ind.cora.{suffix}").write_bytes(b"\x80\x04truncated")
    with pytest.raises(DatasetNotFoundError, match="cora: cannot read the raw files in .*raw .*delete them") as info:
        load_dataset("cora", tmp_path, download=False)
    assert info.value.path == raw


def test_the_longest_matching_prefix_wins(monkeypatch):
    monkeypatch.setattr(registry, "DATASETS", dict(registry.DATASETS))

    def short(name, root):
        return _tiny(name)

    def long(name, root):
        return _tiny(name)

    registry.register_dataset("fam-*")(short)
    registry.register_dataset("fam-x-*")(long)
    assert registry.resolve_loader("fam-x-1") is long
    assert registry.resolve_loader("fam-y") is short


def test_a_bare_prefix_is_no_dataset_name(monkeypatch):
    monkeypatch.setattr(registry, "DATASETS", dict(registry.DATASETS))
    registry.register_dataset("fam-*")(lambda name, root: _tiny(name))
    with pytest.raises(ValueError, match="unknown dataset name 'fam-'"):
        registry.resolve_loader("fam-")


def test_an_empty_root_means_the_default_root(monkeypatch, tmp_path):
    monkeypatch.setattr(registry, "DATASETS", dict(registry.DATASETS))
    monkeypatch.setenv("GRAPHFUSE_DATA_ROOT", str(tmp_path / "data"))
    seen = {}

    def toy(name, root):
        seen["root"] = root
        return _tiny(name)

    registry.register_dataset("toy")(toy)
    registry.load_dataset("toy", "")
    assert seen["root"] == tmp_path / "data"


def test_normalize_features_sums_half_precision_rows_without_overflow():
    x = torch.full((2, 3000), 30.0, dtype=torch.float16)  # a row sum of 90,000 is inf in float16
    out = normalize_features(x)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.float().sum(1), torch.ones(2), rtol=1e-3, atol=0)


def test_normalize_features_refuses_other_types_with_a_type_error():
    import numpy as np

    with pytest.raises(TypeError, match="normalize_features: x must be a floating-point torch.Tensor; got ndarray"):
        normalize_features(np.ones((2, 2)))
    with pytest.raises(TypeError, match="got torch.int64"):
        normalize_features(torch.ones(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"normalize_features: x must have shape \(N, F\); got \(4,\)"):
        normalize_features(torch.ones(4))


def test_node_dataset_refuses_non_tensors_and_mixed_devices():
    good = _tiny()
    fields = {f: getattr(good, f) for f in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask")}
    with pytest.raises(TypeError, match="NodeDataset: y must be a torch.Tensor; got list"):
        NodeDataset(name="t", **{**fields, "y": [0, 1, 0, 1]}, num_classes=2)
    with pytest.raises(ValueError, match="NodeDataset: every tensor must be on one device; got x on cpu, y on meta"):
        NodeDataset(name="t", **{**fields, "y": good.y.to("meta")}, num_classes=2)
