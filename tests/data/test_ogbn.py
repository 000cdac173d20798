"""ogbn-* through ogb: the offline error paths, the non-interactive handling, a tiny local dataset."""

from __future__ import annotations

import builtins
import gzip

import numpy as np
import pytest
import torch

from graphfuse.data import DatasetNotFoundError, load_dataset, ogbn


def _stdin_forbidden(prompt=""):
    raise AssertionError(f"ogb asked on stdin: {prompt!r}")


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.writelines(",".join(map(str, np.atleast_1d(r))) + "\n" for r in rows)


def _fake_arxiv(root, *, release=True, n=30, e=60, f=5, unlabelled=()):
    """A tiny ogbn-arxiv in ogb's raw layout (random content), so ogb processes it without downloading. The
    `unlabelled` nodes get a NaN label (as in ogbn-papers100M) and no split."""
    rng = np.random.default_rng(0)
    folder = root / "ogb" / "ogbn_arxiv"
    _write(folder / "raw" / "edge.csv.gz", rng.integers(0, n, (e, 2)))
    _write(folder / "raw" / "node-feat.csv.gz", rng.standard_normal((n, f)).round(3))
    labels = rng.integers(0, 40, (n, 1)).astype(float)
    labels[list(unlabelled)] = np.nan
    _write(folder / "raw" / "node-label.csv.gz", labels)
    _write(folder / "raw" / "node_year.csv.gz", rng.integers(2000, 2020, (n, 1)))
    _write(folder / "raw" / "num-node-list.csv.gz", [[n]])
    _write(folder / "raw" / "num-edge-list.csv.gz", [[e]])
    perm = rng.permutation(n)
    perm = perm[~np.isin(perm, list(unlabelled))]
    for name, part in (("train", perm[:18]), ("valid", perm[18:24]), ("test", perm[24:])):
        _write(folder / "split" / "time" / f"{name}.csv.gz", part[:, None])
    if release:
        (folder / "RELEASE_v1.txt").write_text("")
    return perm


@pytest.fixture
def offline(monkeypatch):
    calls = []

    def fail(url, folder, download_name, dest):
        calls.append(url)
        raise OSError("network is unreachable")

    monkeypatch.setattr(ogbn, "_download_archive", fail)
    monkeypatch.setattr(builtins, "input", _stdin_forbidden)
    return calls


def test_missing_dataset_offline(offline, tmp_path):
    folder = tmp_path / "ogb" / "ogbn_arxiv"
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("ogbn-arxiv", tmp_path)
    assert info.value.path == folder
    assert str(folder) in str(info.value) and "network is unreachable" in str(info.value)
    assert offline == ["http://snap.stanford.edu/ogb/data/nodeproppred/arxiv.zip"]
    assert not folder.exists()
    with pytest.raises(DatasetNotFoundError):
        load_dataset("ogbn-arxiv", tmp_path)


def test_download_disabled(offline, tmp_path):
    with pytest.raises(DatasetNotFoundError, match="download=False") as info:
        load_dataset("ogbn-products", tmp_path, download=False)
    assert info.value.path == tmp_path / "ogb" / "ogbn_products"
    assert f"extract it in {tmp_path / 'ogb'} and rename its products/ folder to ogbn_products/" in str(info.value)
    assert offline == []


@pytest.mark.parametrize("name, reason", [("ogbn-mag", "heterogeneous"), ("ogbn-proteins", "112-task"),
                                          ("ogbn-nothing", "unknown OGB dataset")])
def test_unsupported_or_unknown(offline, tmp_path, name, reason):
    with pytest.raises(ValueError, match=reason):
        load_dataset(name, tmp_path)
    assert offline == [] and not (tmp_path / "ogb").exists()


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
@pytest.mark.parametrize("release", [True, False])
def test_local_dataset(offline, tmp_path, caplog, release):
    perm = _fake_arxiv(tmp_path, release=release)
    for _ in range(2):
        ds = load_dataset("ogbn-arxiv", tmp_path)
        assert (ds.ogb_name, ds.num_nodes, ds.num_edges, ds.num_features, ds.num_classes) == \
            ("ogbn-arxiv", 30, 60, 5, 40)
        assert ds.y.shape == (30,) and ds.y.dtype == torch.int64 and ds.x.dtype == torch.float32
        assert torch.equal(ds.train_mask.nonzero().view(-1), torch.from_numpy(np.sort(perm[:18])))
        assert torch.equal(ds.test_mask.nonzero().view(-1), torch.from_numpy(np.sort(perm[24:])))
        assert int(ds.val_mask.sum()) == 6
    assert offline == []
    assert ("keeping the local copy" in caplog.text) != release
    undirected = load_dataset("OGBN-ARXIV", tmp_path, to_undirected=True)
    keys = set(map(tuple, undirected.edge_index.t().tolist()))
    assert keys == {(v, u) for u, v in keys}
    assert keys >= set(map(tuple, ds.edge_index.t().tolist()))


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_the_mirror_provides_the_files(offline, tmp_path, monkeypatch):
    """ogbn-* ignored $GRAPHFUSE_DATA_MIRROR, which the docs say every loader reads (review)."""
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    perm = _fake_arxiv(mirror)
    (mirror / "ogb" / "ogbn_arxiv" / "processed").mkdir()
    (mirror / "ogb" / "ogbn_arxiv" / "processed" / "stale.pt").write_text("not copied")
    monkeypatch.setenv("GRAPHFUSE_DATA_MIRROR", str(mirror))
    before = sorted(p.relative_to(mirror) for p in mirror.rglob("*"))
    ds = load_dataset("ogbn-arxiv", root)
    assert torch.equal(ds.train_mask.nonzero().view(-1), torch.from_numpy(np.sort(perm[:18])))
    assert offline == [] and sorted(p.relative_to(mirror) for p in mirror.rglob("*")) == before
    assert not (root / "ogb" / "ogbn_arxiv" / "processed" / "stale.pt").exists()
    assert (root / "ogb" / "ogbn_arxiv" / "processed" / "geometric_data_processed.pt").is_file()


def test_a_pyg_folder_linked_into_the_mirror_is_refused(offline, tmp_path, monkeypatch):
    """ogb reads root/ogb/<dir>_pyg when it exists; only <dir> was checked, so a link named <dir>_pyg into the
    mirror got processed files written into the mirror (review)."""
    mirror, root = tmp_path / "mirror", tmp_path / "root"
    _fake_arxiv(mirror)
    monkeypatch.setenv("GRAPHFUSE_DATA_MIRROR", str(mirror))
    (root / "ogb").mkdir(parents=True)
    (root / "ogb" / "ogbn_arxiv_pyg").symlink_to(mirror / "ogb" / "ogbn_arxiv")
    with pytest.raises(ValueError, match="ogbn_arxiv_pyg"):
        load_dataset("ogbn-arxiv", root)
    assert not (mirror / "ogb" / "ogbn_arxiv" / "processed").exists()


@pytest.mark.parametrize("damage", ["no num-node-list", "truncated edges", "no labels", "no split", "no features"])
def test_unreadable_files_are_named(offline, tmp_path, damage):
    """Missing or truncated files escaped as ogb's RuntimeError('No necessary file'), EOFError or
    FileNotFoundError without a path, and the command line called them a config error (review)."""
    _fake_arxiv(tmp_path)
    folder = tmp_path / "ogb" / "ogbn_arxiv"
    if damage == "truncated edges":
        data = (folder / "raw" / "edge.csv.gz").read_bytes()
        (folder / "raw" / "edge.csv.gz").write_bytes(data[: len(data) // 2])
    else:
        file = {"no num-node-list": "raw/num-node-list.csv.gz", "no labels": "raw/node-label.csv.gz",
                "no split": "split/time/valid.csv.gz", "no features": "raw/node-feat.csv.gz"}[damage]
        (folder / file).unlink()
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("ogbn-arxiv", tmp_path, download=False)
    assert str(folder) in str(info.value) and info.value.path == folder
    if damage == "no features":  # a raw file ogb looks for by name: the message names it
        assert "node-feat.csv.gz missing" in str(info.value)
    assert folder.is_dir() and offline == []  # the user's files are left alone


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_unlabelled_ogb_nodes_get_minus_one(offline, tmp_path):
    perm = _fake_arxiv(tmp_path, unlabelled=(3, 7))
    ds = load_dataset("ogbn-arxiv", tmp_path)
    assert ds.y.dtype == torch.int64
    assert ds.y[[3, 7]].tolist() == [-1, -1]
    assert (ds.y[torch.from_numpy(perm)] >= 0).all()
