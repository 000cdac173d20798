"""Cora (Planetoid) with its public split: 140 train / 500 val / 1,000 test nodes.

Read by ``torch_geometric.datasets.Planetoid(root / "planetoid", "Cora")``. When ``$GRAPHFUSE_DATA_MIRROR``
holds ``planetoid/Cora/raw/ind.cora.*``, those raw files are first copied into
``root/planetoid/Cora/raw`` so that Planetoid finds them and does not download (a copy whose size differs
from the mirror's, or that the mirror changed after it was copied, is replaced); otherwise Planetoid downloads
them, and a failed download, or raw files that cannot be read, raise :class:`DatasetNotFoundError`. Raw files
newer than the processed ones are processed again, with a warning (PyG's Planetoid keeps its processed files).
Loads into one root hold a lock on ``root/planetoid/.lock``, so parallel runs never read files another is
writing. Processed files in ``root/planetoid/Cora/processed`` that cannot be read (a run stopped while Planetoid
wrote them), or that PyG's Planetoid wrote with a ``pre_transform`` or ``pre_filter``, are rebuilt from the raw
files, with a warning.

Shapes:
    x: (2708, 1433) binary bag-of-words; y: (2708,) in [0, 7); edge_index: (2, 10556), both directions.
"""

from __future__ import annotations

import logging
import shutil
import warnings
from pathlib import Path
from typing import Any

from graphfuse.data.dataset import NodeDataset
from graphfuse.data.paths import (
    DatasetNotFoundError,
    check_dataset_folder,
    copy_from_mirror,
    locked,
    mirror_hint,
)
from graphfuse.data.registry import register_dataset

RAW_FILES = [f"ind.cora.{s}" for s in ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")]

log = logging.getLogger(__name__)


def _planetoid_class() -> type:
    from torch_geometric.datasets import Planetoid

    class _Planetoid(Planetoid):
        """Planetoid whose failed download raises DatasetNotFoundError naming the raw folder."""

        def download(self) -> None:
            try:
                super().download()
            except Exception as exc:
                raise DatasetNotFoundError(
                    f"cora: raw files not found in {self.raw_dir} and the download failed ({exc}); put "
                    f"{', '.join(RAW_FILES)} there; {mirror_hint('planetoid/Cora/raw')}", self.raw_dir) from exc

    return _Planetoid


def _has_files(folder: Path) -> bool:
    return folder.is_dir() and any(folder.iterdir())


def _raw_newer(raw_dir: Path, data: Path) -> list[str]:
    """The raw files modified after the processed ``data`` file was written (none when it does not exist)."""
    if not data.is_file():
        return []
    written = data.stat().st_mtime_ns
    return [f for f in RAW_FILES if (raw_dir / f).is_file() and (raw_dir / f).stat().st_mtime_ns > written]


def _load(root: Path, folder: Path, download: bool) -> Any:
    """Cora's PyG ``Data``, with the raw files copied from the mirror first and unreadable processed files
    rebuilt (see the module docstring)."""
    raw_dir = folder / "raw"
    have_raw = copy_from_mirror("planetoid/Cora/raw", raw_dir, RAW_FILES)
    if not have_raw and not download:
        raise DatasetNotFoundError(
            f"cora: raw files not found in {raw_dir} (download=False); put {', '.join(RAW_FILES)} there; "
            f"{mirror_hint('planetoid/Cora/raw')}", raw_dir)
    planetoid = _planetoid_class()
    processed = folder / "processed"
    had_processed = _has_files(processed)
    changed = _raw_newer(raw_dir, processed / "data.pt")
    if changed:
        log.warning("cora: processing the raw files in %s again: %s changed after %s was written", raw_dir,
                    ", ".join(changed), processed / "data.pt")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            data = planetoid(str(root / "planetoid"), "Cora", force_reload=bool(changed))[0]
    except DatasetNotFoundError:
        raise
    except Exception as exc:  # Planetoid does not process again when its files exist, so they failed to read
        if had_processed:  # removed, so that a second failure is told apart as below
            log.warning("cora: rebuilding the unreadable processed files in %s (%s)", processed, exc)
            shutil.rmtree(processed)
            try:
                return planetoid(str(root / "planetoid"), "Cora")[0]
            except DatasetNotFoundError:
                raise
            except Exception as again:
                exc = again
        if _has_files(processed):  # processed, then failed to load what it wrote
            raise DatasetNotFoundError(
                f"cora: processed the raw files in {raw_dir} but cannot load the processed files it wrote in "
                f"{processed} ({type(exc).__name__}: {exc}); is torch-geometric older than this package needs?",
                processed) from exc
        raise DatasetNotFoundError(  # the raw files themselves (e.g. truncated by an interrupted download)
            f"cora: cannot read the raw files in {raw_dir} ({type(exc).__name__}: {exc}); delete them to "
            f"download them again, or replace them; {mirror_hint('planetoid/Cora/raw', RAW_FILES)}", raw_dir) from exc
    stale = [w for w in caught if "argument differs from the one used" in str(w.message)]  # PyG only warns
    for warning in caught:  # the others, shown as they would have been
        if warning not in stale:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    if stale:
        log.warning("cora: rebuilding the processed files in %s, which a pre_transform or pre_filter wrote",
                    processed)
        data = planetoid(str(root / "planetoid"), "Cora", force_reload=True)[0]
    return data


@register_dataset("cora")
def load_cora(name: str, root: Path, *, download: bool = True) -> NodeDataset:
    """Load Cora with the Planetoid public split.

    Args:
        name: "cora".
        root: dataset root; files go to ``root/planetoid/Cora``.
        download: allow Planetoid to download missing raw files.

    Shapes:
        See the module docstring.
    """
    folder = root / "planetoid" / "Cora"
    check_dataset_folder(folder, "cora")
    with locked(root / "planetoid"):
        data = _load(root, folder, download)
    return NodeDataset(
        name=name, x=data.x.float(), y=data.y.long(), edge_index=data.edge_index.long(),
        train_mask=data.train_mask, val_mask=data.val_mask, test_mask=data.test_mask, num_classes=7,
    )
