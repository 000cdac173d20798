"""OGB node property prediction: "ogbn-<name>" through ``ogb.nodeproppred.PygNodePropPredDataset``.

Files live in ``root/ogb/<dir>`` with ``<dir>`` = the name with "-" replaced by "_" (ogb's layout, e.g.
``root/ogb/ogbn_arxiv``). A folder already there is used as is. Otherwise its files are copied from
``$GRAPHFUSE_DATA_MIRROR/ogb/<dir>`` when the mirror has that folder (ogb's processed files excepted), or the
archive is downloaded without ogb's interactive size check (ogb asks on stdin before fetching more than 1 GB;
asking for the dataset by name is the consent here). A failed or disallowed download, and files ogb cannot read
(missing, truncated), raise :class:`DatasetNotFoundError` naming the folder. ogb's other prompt (no
``RELEASE_v<version>.txt`` in the folder: another release, or a copy made by hand) is answered "no": the local
copy is kept, with a warning.

ogb's own cached files (``processed/geometric_data_processed.pt``, ``split_dict.pt``) hold pickled PyG
objects, which ``torch.load``'s ``weights_only=True`` default (torch >= 2.6) refuses; they are written by ogb
under the caller's data root, so they are loaded with ``weights_only=False``, for ogb's module only.

Only single-task multiclass, homogeneous datasets with node features fit :class:`NodeDataset`
(ogbn-arxiv, ogbn-products, ogbn-papers100M); others raise ValueError before anything is downloaded.
The split is ogb's ``get_idx_split()``; labels are squeezed to (N,), unlabelled nodes (NaN labels in
ogbn-papers100M) get -1 and lie in no split. Edges are ogb's as stored (ogbn-arxiv is directed) unless
``to_undirected=True``.

Shapes:
    x: (N, F) float32; y: (N,) int64; edge_index: (2, E) int64.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from graphfuse.data.dataset import NodeDataset
from graphfuse.data.paths import (
    DatasetNotFoundError,
    check_dataset_folder,
    copy_tree_from_mirror,
    download_and_extract,
    locked,
    mirror_hint,
)
from graphfuse.data.registry import register_dataset

log = logging.getLogger(__name__)


def _master() -> Any:
    import ogb.nodeproppred
    import pandas as pd

    path = Path(ogb.nodeproppred.__file__).parent / "master.csv"
    return pd.read_csv(path, index_col=0, keep_default_na=False)


def _resolve(name: str) -> tuple[str, Any]:
    """ogb's spelling of ``name`` (matched case-insensitively) and its meta-information column."""
    master = _master()
    by_lower = {k.lower(): k for k in master.columns}
    if name.lower() not in by_lower:
        raise ValueError(f"load_dataset: unknown OGB dataset {name!r}; ogb knows: {', '.join(master.columns)}")
    ogb_name = by_lower[name.lower()]
    meta = master[ogb_name]
    problems = []
    if meta["is hetero"] == "True":
        problems.append("it is heterogeneous")
    if int(meta["num tasks"]) != 1 or meta["task type"] != "multiclass classification":
        problems.append(f"it is a {meta['num tasks']}-task {meta['task type']} task, not single-task multiclass")
    if meta["has_node_attr"] != "True":
        problems.append("it has no node features")
    if problems:
        raise ValueError(f"load_dataset: {ogb_name} does not fit NodeDataset: {'; '.join(problems)}")
    return ogb_name, meta


def _download_archive(url: str, folder: Path, download_name: str, dest: Path) -> None:
    """Fetch ogb's zip at ``url`` into ``folder``, extract it and move ``folder/download_name`` to ``dest``."""
    download_and_extract(url, folder)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.move(str(folder / download_name), str(dest))


class _TrustedTorch:
    """``torch`` as ogb's dataset module sees it: ``load`` reads its own pickled files (weights_only=False)."""

    load = functools.partial(torch.load, weights_only=False)

    def __getattr__(self, key: str) -> Any:
        return getattr(torch, key)


def _keep_local_copy(prompt: str = "") -> str:
    log.warning("ogb found no release marker (RELEASE_v<version>.txt) in a local dataset folder: another release "
                "of the dataset, or a copy made by hand; keeping the local copy")
    return "n"


@contextlib.contextmanager
def _non_interactive() -> Iterator[None]:
    from unittest import mock

    from ogb.nodeproppred import dataset_pyg

    with mock.patch.object(dataset_pyg, "input", _keep_local_copy, create=True), \
            mock.patch.object(dataset_pyg, "torch", _TrustedTorch()):
        yield


def _dataset_class(allow_download: bool) -> type:
    from ogb.nodeproppred import PygNodePropPredDataset

    class _OgbnDataset(PygNodePropPredDataset):
        """ogb's dataset whose download never prompts and fails with DatasetNotFoundError."""

        def download(self) -> None:
            url = self.meta_info["url"]
            # the archive holds a folder download_name/, which ogb reads as root (e.g. arxiv/ → ogbn_arxiv/)
            by_hand = (f"fetch {url}, extract it in {self.original_root} and rename its {self.download_name}/ "
                       f"folder to {Path(self.root).name}/, {mirror_hint(f'ogb/{Path(self.root).name}')}")
            if not allow_download:
                missing = [Path(p).name for p in self.raw_paths if not Path(p).exists()]
                what = (f"raw file(s) {', '.join(missing)} missing in {self.raw_dir}" if Path(self.root).is_dir()
                        else f"files not found in {self.root}")
                raise DatasetNotFoundError(f"{self.name}: {what} (download=False); {by_hand}", self.root)
            try:
                _download_archive(url, Path(self.original_root), self.download_name, Path(self.root))
            except Exception as exc:
                raise DatasetNotFoundError(f"{self.name}: files not found in {self.root} and downloading "
                                           f"{url} failed ({exc}); {by_hand}", self.root) from exc

    return _OgbnDataset


@register_dataset("ogbn-*")
def load_ogbn(name: str, root: Path, *, download: bool = True, to_undirected: bool = False) -> NodeDataset:
    """Load an OGB node-property-prediction dataset with its official split.

    Args:
        name: "ogbn-<name>" (case-insensitive), e.g. "ogbn-arxiv".
        root: dataset root; ogb's folder is ``root/ogb/<name with _>``.
        download: fetch the archive when the folder is absent.
        to_undirected: add reverse edges (deduplicated) to directed datasets such as ogbn-arxiv.

    Shapes:
        See the module docstring.
    """
    ogb_name, meta = _resolve(name)
    folder = root / "ogb" / ogb_name.replace("-", "_")
    pyg_folder = folder.with_name(folder.name + "_pyg")  # ogb reads this one instead when it exists
    for path in (folder, pyg_folder):
        check_dataset_folder(path, ogb_name)
    existed = folder.exists() or pyg_folder.exists()
    try:
        with _non_interactive(), locked(root / "ogb"):
            if not existed:
                copy_tree_from_mirror(f"ogb/{folder.name}", folder, skip=("processed",))
            dataset = _dataset_class(download)(ogb_name, root=str(root / "ogb"))
            split = dataset.get_idx_split()
    except Exception as exc:  # ogb's own errors for files it cannot read: RuntimeError, EOFError, OSError, ...
        used = pyg_folder if pyg_folder.exists() else folder
        if not existed:  # what this call copied or downloaded goes: the next call starts afresh
            shutil.rmtree(folder, ignore_errors=True)
        if isinstance(exc, DatasetNotFoundError):
            raise
        advice = ("the files this call copied or downloaded were removed" if not existed else
                  "delete the folder to download them again, or replace them")
        raise DatasetNotFoundError(f"{ogb_name}: ogb cannot read the files in {used} ({type(exc).__name__}: {exc}); "
                                   f"{advice}; {mirror_hint(f'ogb/{folder.name}')}", used) from exc
    data = dataset[0]
    num_nodes = data.num_nodes
    y = data.y.view(-1)
    if y.is_floating_point():
        y = torch.where(torch.isnan(y), -1, y).long()
    edge_index = data.edge_index.long()
    if to_undirected:
        key = torch.unique(torch.cat([edge_index[0] * num_nodes + edge_index[1],
                                      edge_index[1] * num_nodes + edge_index[0]]))
        edge_index = torch.stack([key // num_nodes, key % num_nodes])
    masks = []
    for key in ("train", "valid", "test"):
        mask = torch.zeros(num_nodes, dtype=torch.bool)
        mask[split[key]] = True
        masks.append(mask)
    return NodeDataset(
        name=name, x=data.x.float(), y=y.long(), edge_index=edge_index, train_mask=masks[0],
        val_mask=masks[1], test_mask=masks[2], num_classes=int(meta["num classes"]), ogb_name=ogb_name,
    )
