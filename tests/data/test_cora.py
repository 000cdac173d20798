"""Cora through Planetoid, fed from the offline mirror; the offline error path."""

from __future__ import annotations

import urllib.error

import pytest
import torch
from torch_geometric.datasets import Planetoid

from graphfuse.data import DatasetNotFoundError, load_dataset
from graphfuse.data.planetoid import RAW_FILES


def _no_download(self):
    raise AssertionError("Planetoid tried to download although the mirror holds the raw files")


def test_cora_from_mirror(mirror, tmp_path, monkeypatch):
    monkeypatch.setattr(Planetoid, "download", _no_download)
    ds = load_dataset("cora", tmp_path)
    assert (ds.name, ds.num_nodes, ds.num_edges, ds.num_features, ds.num_classes) == ("cora", 2708, 10556, 1433, 7)
    assert ds.x.dtype == torch.float32 and ds.y.dtype == torch.int64 and ds.edge_index.dtype == torch.int64
    assert int(ds.y.min()) == 0 and int(ds.y.max()) == 6
    assert [int(m.sum()) for m in (ds.train_mask, ds.val_mask, ds.test_mask)] == [140, 500, 1000]
    assert torch.equal(ds.train_mask.nonzero().view(-1), torch.arange(140))
    assert not (ds.train_mask & ds.val_mask).any() and not (ds.val_mask & ds.test_mask).any()
    assert torch.bincount(ds.y[ds.train_mask]).tolist() == [20] * 7
    assert ds.ogb_name is None
    for f in RAW_FILES:
        assert (tmp_path / "planetoid" / "Cora" / "raw" / f).read_bytes() == \
            (mirror / "planetoid" / "Cora" / "raw" / f).read_bytes()
    again = load_dataset("cora", tmp_path, normalize_features=True)
    assert torch.equal(again.edge_index, ds.edge_index)
    torch.testing.assert_close(again.x.sum(1), torch.ones(2708))
    torch.testing.assert_close(again.x, ds.x / ds.x.sum(1, keepdim=True))


def test_cora_offline_without_mirror(no_mirror, tmp_path, monkeypatch):
    def fail(self):
        raise urllib.error.URLError("network is unreachable")

    monkeypatch.setattr(Planetoid, "download", fail)
    raw = tmp_path / "planetoid" / "Cora" / "raw"
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("cora", tmp_path)
    assert info.value.path == raw
    assert str(raw) in str(info.value) and "GRAPHFUSE_DATA_MIRROR" in str(info.value)
    assert "network is unreachable" in str(info.value)


def test_cora_download_disabled(no_mirror, tmp_path, monkeypatch):
    monkeypatch.setattr(Planetoid, "download", _no_download)
    with pytest.raises(DatasetNotFoundError, match="download=False") as info:
        load_dataset("cora", tmp_path, download=False)
    assert info.value.path == tmp_path / "planetoid" / "Cora" / "raw"


def test_cora_with_a_mirror_that_lacks_it_says_so(no_mirror, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHFUSE_DATA_MIRROR", str(tmp_path / "wrong"))  # e.g. one level too deep
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("cora", tmp_path / "root", download=False)
    assert f"$GRAPHFUSE_DATA_MIRROR={tmp_path / 'wrong'} is set but holds no complete planetoid/Cora/raw/" in str(
        info.value)


@pytest.mark.parametrize("damaged", ["data.pt", "pre_transform.pt"])
def test_cora_rebuilds_damaged_processed_files(mirror, tmp_path, monkeypatch, caplog, damaged):
    monkeypatch.setattr(Planetoid, "download", _no_download)
    ds = load_dataset("cora", tmp_path)
    path = tmp_path / "planetoid" / "Cora" / "processed" / damaged
    path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])  # a run stopped while writing it
    again = load_dataset("cora", tmp_path)
    for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(again, key), getattr(ds, key)), key
    assert "rebuilding the unreadable processed files" in caplog.text
    caplog.clear()
    load_dataset("cora", tmp_path)
    assert "rebuilding" not in caplog.text


def test_processed_files_of_another_pre_transform_are_rebuilt(mirror, tmp_path, caplog):
    """PyG's Planetoid only warns when its processed files were written with another pre_transform: Cora came
    back row-normalised (not the binary bag-of-words) after Planetoid(pre_transform=NormalizeFeatures()) had
    processed the same root."""
    from torch_geometric.transforms import NormalizeFeatures

    plain = load_dataset("cora", tmp_path)
    Planetoid(str(tmp_path / "planetoid"), "Cora", pre_transform=NormalizeFeatures(), force_reload=True)
    with caplog.at_level("WARNING", logger="graphfuse.data.planetoid"):
        again = load_dataset("cora", tmp_path)
    assert "a pre_transform or pre_filter wrote" in caplog.text
    assert torch.equal(again.x, plain.x) and set(again.x.unique().tolist()) == {0.0, 1.0}


def test_raw_files_the_mirror_changed_are_copied_and_processed_again(mirror, tmp_path, monkeypatch, caplog):
    """The processed graph was kept after the mirror's raw files changed (PyG's Planetoid processes only when its
    processed files are missing), and a changed raw file of the same size was not even copied."""
    import os
    import shutil

    changed = tmp_path / "mirror"
    shutil.copytree(mirror / "planetoid" / "Cora" / "raw", changed / "planetoid" / "Cora" / "raw")
    monkeypatch.setenv("GRAPHFUSE_DATA_MIRROR", str(changed))
    monkeypatch.setattr(Planetoid, "download", _no_download)
    before = load_dataset("cora", tmp_path / "root")
    folder = tmp_path / "root" / "planetoid" / "Cora"
    past = (folder / "processed" / "data.pt").stat().st_mtime_ns - 10**10
    for made in [folder / "processed" / "data.pt", *(folder / "raw" / f for f in RAW_FILES)]:
        os.utime(made, ns=(past, past))  # copied and processed a while ago
    index = changed / "planetoid" / "Cora" / "raw" / "ind.cora.test.index"
    size = index.stat().st_size
    lines = index.read_bytes().split(b"\n")
    other = next(i for i, v in enumerate(lines) if len(v) == len(lines[0]) and v != lines[0])
    lines[0], lines[other] = lines[other], lines[0]  # two test nodes swap places: the same size
    index.write_bytes(b"\n".join(lines))
    assert index.stat().st_size == size
    with caplog.at_level("WARNING", logger="graphfuse.data.planetoid"):
        after = load_dataset("cora", tmp_path / "root")
    assert "processing the raw files in" in caplog.text and "ind.cora.test.index changed" in caplog.text
    shutil.copytree(changed / "planetoid" / "Cora" / "raw", tmp_path / "fresh" / "Cora" / "raw")
    pyg = Planetoid(str(tmp_path / "fresh"), "Cora")[0]  # PyG on a fresh copy of the changed files
    assert torch.equal(after.x, pyg.x) and torch.equal(after.y, pyg.y) and not torch.equal(after.x, before.x)
    caplog.clear()
    with caplog.at_level("WARNING", logger="graphfuse.data.planetoid"):
        load_dataset("cora", tmp_path / "root")
    assert "processing" not in caplog.text  # once


def test_unreadable_mirror_copies_are_not_blamed_on_a_missing_mirror(no_mirror, tmp_path, monkeypatch):
    """Found by review: the message said the mirror 'holds no complete planetoid/Cora/raw/ folder' although
    every file was there (the copies came from it)."""
    source = tmp_path / "mirror" / "planetoid" / "Cora" / "raw"
    source.mkdir(parents=True)
    for f in RAW_FILES:
        (source / f).write_bytes(b"\x80\x04truncated")
    monkeypatch.setenv("GRAPHFUSE_DATA_MIRROR", str(tmp_path / "mirror"))
    with pytest.raises(DatasetNotFoundError, match="cora: cannot read the raw files") as info:
        load_dataset("cora", tmp_path / "root", download=False)
    assert f"they are copies of $GRAPHFUSE_DATA_MIRROR={tmp_path / 'mirror'}'s planetoid/Cora/raw/ files" in str(
        info.value)
    assert "holds no complete" not in str(info.value)


def test_processed_files_that_cannot_be_loaded_are_named(mirror, tmp_path, monkeypatch):
    """Found by review: PyG 2.5 under torch >= 2.6 wrote its processed file and could not load it back; that was
    reported as unreadable raw files, and, with processed files already there, as a traceback (exit 1)."""
    import pickle

    def refuse(self, path, *args, **kwargs):
        raise pickle.UnpicklingError("Weights only load failed")

    monkeypatch.setattr(Planetoid, "download", _no_download)
    monkeypatch.setattr(Planetoid, "load", refuse)
    processed = tmp_path / "planetoid" / "Cora" / "processed"
    for _ in range(2):  # without processed files, then with the ones the first call wrote
        with pytest.raises(DatasetNotFoundError, match="cora: processed the raw files in .* but cannot load the "
                           "processed files it wrote in .*processed .*UnpicklingError") as info:
            load_dataset("cora", tmp_path)
        assert info.value.path == processed and any(processed.iterdir())
    monkeypatch.undo()
    monkeypatch.setenv("GRAPHFUSE_DATA_MIRROR", str(mirror))
    assert load_dataset("cora", tmp_path).num_nodes == 2708  # rebuilt once the loader can read them
