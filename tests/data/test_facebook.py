"""Facebook Page-Page (MUSAE) from the offline mirror: sizes, edges, labels, the fixed split, the cache."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
import torch

from graphfuse.data import DatasetNotFoundError, facebook, load_dataset

CLASSES = ["company", "government", "politician", "tvshow"]


@pytest.fixture(scope="module")
def raw(mirror):
    folder = mirror / "musae" / "facebook"
    if not (folder / "facebook_edges.csv").is_file():
        pytest.skip(f"no Facebook files in {folder}")
    return folder


@pytest.fixture(scope="module")
def fb_root(raw, tmp_path_factory):
    return tmp_path_factory.mktemp("facebook_root")


@pytest.fixture(scope="module")
def fb(fb_root):
    return load_dataset("facebook", fb_root)


def test_sizes(fb):
    assert (fb.name, fb.num_nodes, fb.num_features, fb.num_classes) == ("facebook", 22470, 4714, 4)
    assert fb.x.dtype == torch.float32 and fb.y.dtype == torch.int64 and fb.edge_index.dtype == torch.int64
    assert ((fb.x == 0) | (fb.x == 1)).all()
    assert int(fb.x.sum()) == 314583
    assert fb.ogb_name is None


def test_edges_match_raw_file(fb, raw):
    with open(raw / "facebook_edges.csv", newline="") as f:
        rows = list(csv.reader(f))[1:]
    assert len(rows) == 171002
    undirected = {frozenset((int(a), int(b))) for a, b in rows if a != b}
    assert fb.num_edges == 2 * len(undirected)
    src, dst = fb.edge_index
    assert not (src == dst).any()
    keys = src * fb.num_nodes + dst
    assert torch.equal(keys, torch.unique(keys))
    assert torch.equal(torch.sort(dst * fb.num_nodes + src).values, keys)
    sample = torch.randperm(fb.num_edges, generator=torch.Generator().manual_seed(0))[:2000]
    assert all(frozenset((int(src[i]), int(dst[i]))) in undirected for i in sample)


def test_labels_and_features_match_raw_files(fb, raw):
    with open(raw / "facebook_target.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    expected = torch.zeros(len(rows), dtype=torch.long)
    for r in rows:
        expected[int(r["id"])] = CLASSES.index(r["page_type"])
    assert torch.equal(fb.y, expected)
    assert any("," in r["page_name"] for r in rows)
    with open(raw / "facebook_features.json") as f:
        table = json.load(f)
    ids = sorted({i for v in table.values() for i in v})
    for node in ("0", "554", "22469"):
        columns = sorted(ids.index(i) for i in table[node])
        assert fb.x[int(node)].nonzero().view(-1).tolist() == columns


def test_split_is_stratified_disjoint_and_covering(fb):
    masks = torch.stack([fb.train_mask, fb.val_mask, fb.test_mask])
    assert torch.equal(masks.sum(0), torch.ones(fb.num_nodes, dtype=torch.long))
    for c in range(4):
        n_c = int((fb.y == c).sum())
        train, val = int((fb.train_mask & (fb.y == c)).sum()), int((fb.val_mask & (fb.y == c)).sum())
        assert (train, val) == (int(0.2 * n_c), int(0.2 * n_c))


def test_split_is_fixed_and_cached(fb, fb_root, raw, tmp_path, monkeypatch):
    assert (fb_root / "facebook" / "processed.pt").is_file()
    monkeypatch.setattr(facebook, "_process", lambda raw, folder: pytest.fail("raw files parsed despite the cache"))
    cached = load_dataset("facebook", fb_root)
    for key in ("edge_index", "y", "train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(cached, key), getattr(fb, key))
    assert torch.equal(cached.x[:500], fb.x[:500])
    del cached
    monkeypatch.undo()
    torch.manual_seed(1234)
    fresh = load_dataset("facebook", tmp_path)
    for key in ("train_mask", "val_mask", "test_mask"):
        assert torch.equal(getattr(fresh, key), getattr(fb, key))


@pytest.mark.parametrize("content", [b"hello world" * 10, "incomplete"])
def test_unreadable_cache_is_rebuilt(fb, raw, tmp_path, content, caplog):
    # both failed with a bare KeyError (101, 'feature_ids') instead of being rebuilt from the raw files
    path = tmp_path / "facebook" / "processed.pt"
    path.parent.mkdir()
    if content == "incomplete":
        torch.save({"version": facebook.CACHE_VERSION, "y": fb.y}, path)
    else:
        path.write_bytes(content)
    ds = load_dataset("facebook", tmp_path)
    for key in ("edge_index", "y", "train_mask", "test_mask"):
        assert torch.equal(getattr(ds, key), getattr(fb, key))
    assert "ignoring" in caplog.text and str(path) in caplog.text
    assert "feature_ids" in torch.load(path, weights_only=True)


def test_snap_file_names(fb, raw, tmp_path, no_mirror):
    snap = tmp_path / "facebook" / "facebook_large"
    snap.mkdir(parents=True)
    for suffix in ("edges.csv", "features.json", "target.csv"):
        shutil.copyfile(raw / f"facebook_{suffix}", snap / f"musae_facebook_{suffix}")
    ds = load_dataset("facebook", tmp_path, download=False)
    assert torch.equal(ds.edge_index, fb.edge_index) and torch.equal(ds.test_mask, fb.test_mask)


def test_missing_files_offline(no_mirror, tmp_path, monkeypatch):
    def fail(folder):
        raise OSError("network is unreachable")

    monkeypatch.setattr(facebook, "download_and_extract", lambda url, folder: fail(folder))
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("facebook", tmp_path)
    assert info.value.path == tmp_path / "facebook"
    message = str(info.value)
    assert str(tmp_path / "facebook") in message and "GRAPHFUSE_DATA_MIRROR" in message
    assert "network is unreachable" in message and facebook.SNAP_URL in message
    monkeypatch.setattr(facebook, "download_and_extract", lambda url, folder: pytest.fail("download despite download=False"))
    with pytest.raises(DatasetNotFoundError, match="download=False"):
        load_dataset("facebook", tmp_path, download=False)


def _tiny_musae(folder, labels=("company", "tvshow", "company")):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "facebook_edges.csv").write_text("id_1,id_2\n0,1\n1,2\n")
    (folder / "facebook_features.json").write_text(json.dumps({"0": [5], "1": [7, 5], "2": []}))
    rows = "".join(f"{i},{i},page{i},{t}\n" for i, t in enumerate(labels))
    (folder / "facebook_target.csv").write_text("id,facebook_id,page_name,page_type\n" + rows)


def test_the_cache_follows_changed_raw_files(no_mirror, tmp_path, caplog):
    """processed.pt was checked only by its version: edited or replaced raw files were never read again."""
    _tiny_musae(tmp_path / "facebook")
    assert load_dataset("facebook", tmp_path, download=False).y.tolist() == [0, 1, 0]
    _tiny_musae(tmp_path / "facebook", labels=("tvshow", "politician", "company"))
    assert load_dataset("facebook", tmp_path, download=False).y.tolist() == [2, 1, 0]
    assert "the raw files changed" in caplog.text


def test_unparsable_raw_files_are_named(no_mirror, tmp_path):
    """A truncated facebook_features.json was a bare JSONDecodeError, reported as a bad data config."""
    _tiny_musae(tmp_path / "facebook")
    (tmp_path / "facebook" / "facebook_features.json").write_text('{"0": [5], "1"')
    with pytest.raises(DatasetNotFoundError, match=r"facebook: cannot read the raw file \S*facebook_features\.json"
                       r" \(JSONDecodeError"):
        load_dataset("facebook", tmp_path, download=False)


def _tiny_musae_with_ids(folder, ids=(0, 1, 2)):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "facebook_edges.csv").write_text("id_1,id_2\n0,1\n1,2\n")
    (folder / "facebook_features.json").write_text(json.dumps({"0": [5], "1": [7, 5], "2": []}))
    rows = "".join(f"{i},{i},page{i},company\n" for i in ids)
    (folder / "facebook_target.csv").write_text("id,facebook_id,page_name,page_type\n" + rows)


@pytest.mark.parametrize("ids", [(0, 0, 2), (0, 1, 3)], ids=["repeated", "gap"])
def test_target_ids_must_number_the_nodes(no_mirror, tmp_path, ids):
    """facebook_target.csv must list each node 0..N-1 once: a repeated id left a label uninitialised (np.empty),
    an id past N failed with a bare IndexError (mutant DA9 dropped the check)."""
    _tiny_musae_with_ids(tmp_path / "facebook", ids)
    with pytest.raises(DatasetNotFoundError, match=r"facebook: cannot read the raw file \S*facebook_target\.csv "
                       r"\(ValueError: facebook: ids in \S* must be 0\.\.2\)"):
        load_dataset("facebook", tmp_path, download=False)
    _tiny_musae_with_ids(tmp_path / "facebook")
    assert load_dataset("facebook", tmp_path, download=False).y.tolist() == [0, 0, 0]
