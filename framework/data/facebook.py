"""Facebook Page-Page (MUSAE): 22,470 verified Facebook pages, mutual likes as edges, 4 page types.

Raw files (``facebook_edges.csv`` with ``id_1,id_2``; ``facebook_features.json`` mapping a node id to its
list of feature ids; ``facebook_target.csv`` with ``id,facebook_id,page_name,page_type``) are read from,
in order: ``$GRAPHFUSE_DATA_MIRROR/musae/facebook/``, ``root/facebook/`` and ``root/facebook/facebook_large/``;
SNAP's names ``musae_facebook_*`` are accepted as well. When none holds them, SNAP's archive
(``facebook_large.zip``) is downloaded and extracted into ``root/facebook``; a failed download, or raw files
that cannot be parsed, raise :class:`DatasetNotFoundError`. Processed tensors are cached in
``root/facebook/processed.pt`` (features as sparse indices, densified on load), so later loads skip parsing;
the cache records the raw files' paths, sizes and modification times and is rebuilt when they change.

Processing:
    - edges: made undirected (both directions), deduplicated, self-loops removed, sorted by (source, target);
    - labels: ``page_type`` classes in sorted order: 0 company, 1 government, 2 politician, 3 tvshow;
    - features: dense float32 multi-hot; feature ids become columns 0..F-1 in sorted id order (F = 4,714);
    - split (there is no standard one, so this one is fixed and independent of any training seed): for each
      class c in order, the class's node ids in increasing order are shuffled by
      ``torch.randperm(n_c, generator=g)`` with one ``g = torch.Generator().manual_seed(0)`` shared by the
      classes; the first ``floor(0.2 n_c)`` are train, the next ``floor(0.2 n_c)`` validation, the rest test.

Shapes:
    x: (22470, 4714) float32 (about 424 MB dense); y: (22470,) in [0, 4); edge_index: (2, 2 E_undirected).
"""

from __future__ import annotations

import csv
import itertools
import json
import logging
import os
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from graphfuse.data.dataset import NodeDataset
from graphfuse.data.paths import (
    DatasetNotFoundError,
    check_dataset_folder,
    download_and_extract,
    mirror_dir,
    mirror_hint,
)
from graphfuse.data.registry import register_dataset

SNAP_URL = "https://snap.stanford.edu/data/facebook_large.zip"
CACHE_VERSION = 2  # 2: the raw files' sizes and times ("sources")
SPLIT_SEED = 0
TRAIN_FRACTION = 0.2
VAL_FRACTION = 0.2
_PREFIXES = ("facebook_", "musae_facebook_")
_SUFFIXES = ("edges.csv", "features.json", "target.csv")

log = logging.getLogger(__name__)


def _find_raw(root: Path) -> dict[str, Path] | None:
    folders = [mirror_dir("musae/facebook"), root / "facebook", root / "facebook" / "facebook_large"]
    for folder in folders:
        if folder is None:
            continue
        for prefix in _PREFIXES:
            paths = {s.split(".")[0]: folder / (prefix + s) for s in _SUFFIXES}
            if all(p.is_file() for p in paths.values()):
                return paths
    return None


def _sources(raw: dict[str, Path]) -> dict[str, list]:
    """What the cache was built from: each raw file's path, size and modification time."""
    return {key: [str(path), path.stat().st_size, path.stat().st_mtime_ns] for key, path in sorted(raw.items())}


def _read_labels(path: Path) -> tuple[Tensor, list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = [(int(r["id"]), r["page_type"]) for r in csv.DictReader(f)]
    ids = np.fromiter((i for i, _ in rows), dtype=np.int64, count=len(rows))
    if not np.array_equal(np.sort(ids), np.arange(len(rows))):
        raise ValueError(f"facebook: ids in {path} must be 0..{len(rows) - 1}")
    class_names = sorted({t for _, t in rows})
    index = {t: c for c, t in enumerate(class_names)}
    y = np.empty(len(rows), dtype=np.int64)
    y[ids] = [index[t] for _, t in rows]
    return torch.from_numpy(y), class_names


def _read_edges(path: Path, num_nodes: int) -> Tensor:
    pairs = torch.from_numpy(np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2))
    src, dst = pairs[:, 0], pairs[:, 1]
    if pairs.numel() and (int(pairs.min()) < 0 or int(pairs.max()) >= num_nodes):
        raise ValueError(f"facebook: edge ids in {path} must lie in [0, {num_nodes})")
    keep = src != dst
    src, dst = torch.cat([src[keep], dst[keep]]), torch.cat([dst[keep], src[keep]])
    key = torch.unique(src * num_nodes + dst)
    return torch.stack([key // num_nodes, key % num_nodes])


def _read_features(path: Path, num_nodes: int) -> tuple[Tensor, Tensor, Tensor]:
    with open(path, encoding="utf-8") as f:
        table: dict[str, list[int]] = json.load(f)
    nodes = np.fromiter((int(k) for k in table), dtype=np.int64, count=len(table))
    counts = np.fromiter((len(v) for v in table.values()), dtype=np.int64, count=len(table))
    ids = np.fromiter(itertools.chain.from_iterable(table.values()), dtype=np.int64, count=int(counts.sum()))
    if nodes.size and (nodes.min() < 0 or nodes.max() >= num_nodes):
        raise ValueError(f"facebook: node ids in {path} must lie in [0, {num_nodes})")
    feature_ids, col = np.unique(ids, return_inverse=True)
    row = np.repeat(nodes, counts)
    return torch.from_numpy(row), torch.from_numpy(col.astype(np.int64)), torch.from_numpy(feature_ids)


def stratified_split(y: Tensor, num_classes: int) -> tuple[Tensor, Tensor, Tensor]:
    """The fixed Facebook split described in the module docstring.

    Shapes:
        y: (N,) int64; returns three (N,) bool masks.
    """
    g = torch.Generator().manual_seed(SPLIT_SEED)
    masks = [torch.zeros(y.numel(), dtype=torch.bool) for _ in range(3)]
    for c in range(num_classes):
        members = (y == c).nonzero().view(-1)
        members = members[torch.randperm(members.numel(), generator=g)]
        n_train = int(members.numel() * TRAIN_FRACTION)
        n_val = int(members.numel() * VAL_FRACTION)
        masks[0][members[:n_train]] = True
        masks[1][members[n_train:n_train + n_val]] = True
        masks[2][members[n_train + n_val:]] = True
    return masks[0], masks[1], masks[2]


def _parse(path: Path, folder: Path, read: Callable[..., Any], *args: Any) -> Any:
    """``read(path, *args)``, a file that cannot be parsed (truncated, edited) raising DatasetNotFoundError."""
    try:
        return read(path, *args)
    except (ValueError, KeyError, TypeError, csv.Error) as exc:  # JSONDecodeError and UnicodeError are ValueErrors
        raise DatasetNotFoundError(f"facebook: cannot read the raw file {path} ({type(exc).__name__}: {exc}); "
                                   f"replace it (or delete the copies under {folder} to download them again)",
                                   path) from exc


def _process(raw: dict[str, Path], folder: Path) -> dict:
    y, class_names = _parse(raw["target"], folder, _read_labels)
    num_nodes = y.numel()
    feat_row, feat_col, feature_ids = _parse(raw["features"], folder, _read_features, num_nodes)
    edge_index = _parse(raw["edges"], folder, _read_edges, num_nodes)
    train_mask, val_mask, test_mask = stratified_split(y, len(class_names))
    return {
        "version": CACHE_VERSION, "sources": _sources(raw), "edge_index": edge_index, "y": y,
        "feat_row": feat_row, "feat_col": feat_col, "feature_ids": feature_ids, "class_names": class_names,
        "train_mask": train_mask, "val_mask": val_mask, "test_mask": test_mask,
    }


_CACHE_KEYS = {"version", "sources", "edge_index", "y", "feat_row", "feat_col", "feature_ids", "class_names", "train_mask",
               "val_mask", "test_mask"}


def _load_cache(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        cache = torch.load(path, weights_only=True)
    except (OSError, RuntimeError, EOFError, KeyError, ValueError, pickle.UnpicklingError):
        # torch's legacy reader raises KeyError or ValueError on a file that is no torch file at all
        log.warning("facebook: ignoring unreadable cache %s", path)
        return None
    if not isinstance(cache, dict) or cache.get("version") != CACHE_VERSION:
        return None
    if not _CACHE_KEYS <= cache.keys():
        log.warning("facebook: ignoring incomplete cache %s", path)
        return None
    return cache


@register_dataset("facebook")
def load_facebook(name: str, root: Path, *, download: bool = True) -> NodeDataset:
    """Load Facebook Page-Page with the fixed stratified 20/20/60 split.

    Args:
        name: "facebook".
        root: dataset root; the cache and any download go to ``root/facebook``.
        download: fetch SNAP's archive when no raw files are found.

    Shapes:
        See the module docstring.
    """
    folder = root / "facebook"
    check_dataset_folder(folder, "facebook")
    cache_path = folder / "processed.pt"
    cache = _load_cache(cache_path)
    raw = _find_raw(root)
    if cache is not None and raw is not None and cache["sources"] != _sources(raw):
        log.warning("facebook: rebuilding %s: the raw files changed since it was written", cache_path)
        cache = None
    if cache is None:
        if raw is None:
            expected = folder / "facebook_{edges.csv,features.json,target.csv}"
            hint = f"put the MUSAE files at {expected} (or SNAP's musae_facebook_* names); {mirror_hint('musae/facebook')}"
            if not download:
                raise DatasetNotFoundError(f"facebook: raw files not found (download=False); {hint}", folder)
            try:
                download_and_extract(SNAP_URL, folder)
            except Exception as exc:
                raise DatasetNotFoundError(
                    f"facebook: raw files not found and downloading {SNAP_URL} failed ({exc}); {hint}",
                    folder) from exc
            raw = _find_raw(root)
            if raw is None:
                raise DatasetNotFoundError(f"facebook: {SNAP_URL} did not contain the expected files; {hint}",
                                           folder)
        cache = _process(raw, folder)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = cache_path.with_suffix(f".tmp{os.getpid()}")
        torch.save(cache, tmp)
        os.replace(tmp, cache_path)
    num_nodes = cache["y"].numel()
    x = torch.zeros(num_nodes, cache["feature_ids"].numel(), dtype=torch.float32)
    x[cache["feat_row"], cache["feat_col"]] = 1.0
    return NodeDataset(
        name=name, x=x, y=cache["y"], edge_index=cache["edge_index"], train_mask=cache["train_mask"],
        val_mask=cache["val_mask"], test_mask=cache["test_mask"], num_classes=len(cache["class_names"]),
    )
