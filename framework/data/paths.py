"""Where datasets live: the cache root, the read-only offline mirror, and the error for missing files.

``default_root()`` is ``$GRAPHFUSE_DATA_ROOT`` or ``~/.cache/graphfuse/datasets``; loaders write raw copies
and processed files only below it. ``$GRAPHFUSE_DATA_MIRROR`` names an optional read-only folder of raw files
(layout of /work/shared/datasets: ``planetoid/Cora/raw/ind.cora.*``, ``musae/facebook/facebook_*``; OGB's as
under the root, ``ogb/ogbn_products/{raw,split}/...``); loaders copy from it or read it, never write into it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # not POSIX: loads that share a root are not serialised
    fcntl = None

ROOT_ENV = "GRAPHFUSE_DATA_ROOT"
MIRROR_ENV = "GRAPHFUSE_DATA_MIRROR"


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are neither on disk nor downloadable (e.g. offline without a mirror).

    Attributes:
        path: the file or folder the loader expected.
    """

    def __init__(self, message: str, path: str | os.PathLike) -> None:
        super().__init__(message)
        self.path = Path(path)


def default_root() -> Path:
    """The dataset cache root: ``$GRAPHFUSE_DATA_ROOT`` or ``~/.cache/graphfuse/datasets``."""
    env = os.environ.get(ROOT_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "graphfuse" / "datasets"


def check_outside_mirror(path: str | os.PathLike, what: str, instead: str) -> None:
    """Raise ValueError when ``path`` is ``$GRAPHFUSE_DATA_MIRROR`` or lies inside it (after ``~`` and ``..``): it
    is about to be written (dataset copies and processed files, cached coefficients), and the mirror is
    read-only (file permissions alone may not stop a privileged user). ``what`` names the setting in the
    message (e.g. ``"load_dataset: root"``), ``instead`` says what to do."""
    env = os.environ.get(MIRROR_ENV)
    if not env:
        return
    mirror = Path(env).expanduser().resolve()
    resolved = Path(path).expanduser().resolve()
    if resolved == mirror or mirror in resolved.parents:
        raise ValueError(f"{what}={str(path)!r} lies inside ${MIRROR_ENV}={env}, which graphfuse only reads; {instead}")


def check_dataset_folder(folder: Path, owner: str) -> None:
    """:func:`check_outside_mirror` for a loader's own folder under the (already checked) root: a folder that
    resolves into the mirror, e.g. a symlink to a shared copy, would get processed files written there."""
    check_outside_mirror(folder, f"{owner}: dataset folder", "it is written to (a link into the mirror?); make it a "
                         "real folder")


def mirror_dir(relative: str) -> Path | None:
    """``$GRAPHFUSE_DATA_MIRROR/relative`` when the variable is set and that folder exists, else None."""
    env = os.environ.get(MIRROR_ENV)
    if not env:
        return None
    path = Path(env).expanduser() / relative
    return path if path.is_dir() else None


def _complete_mirror(relative: str, file_names: list[str]) -> Path | None:
    """The mirror folder ``relative`` when it holds every one of ``file_names``, else None."""
    source = mirror_dir(relative)
    return source if source is not None and all((source / f).is_file() for f in file_names) else None


def mirror_hint(relative: str, file_names: list[str] = ()) -> str:
    """The end of a missing- or unreadable-files message: how to point the mirror at ``relative``, or, when the
    variable is already set, whether its folder holds every one of ``file_names`` (then the files at hand are
    its copies) or lacks ``relative/`` or some of them."""
    env = os.environ.get(MIRROR_ENV)
    if not env:
        return f"or set ${MIRROR_ENV} to a folder holding {relative}/"
    if file_names and _complete_mirror(relative, file_names) is not None:
        return f"they are copies of ${MIRROR_ENV}={env}'s {relative}/ files"
    return f"${MIRROR_ENV}={env} is set but holds no complete {relative}/ folder"


def copy_from_mirror(relative: str, dest: Path, file_names: list[str]) -> bool:
    """Copy ``file_names`` from the mirror folder ``relative`` into ``dest``: those missing there, those whose
    size differs from the mirror's (a partial file left by an interrupted download was kept forever) and those
    the mirror changed after they were copied.

    Copies contents only (``shutil.copyfile``), so the copies are writable even though the mirror is not. Each
    file is copied to a temporary name and renamed into place, so an interrupted copy never leaves a partial
    file under a name the next call would take as complete.

    Returns:
        True when every file of ``file_names`` is in ``dest`` afterwards.
    """
    source = _complete_mirror(relative, file_names)
    if source is None:
        return all((dest / f).is_file() for f in file_names)
    for f in file_names:
        _copy_file(source / f, dest / f)
    return True


def copy_tree_from_mirror(relative: str, dest: Path, skip: tuple[str, ...] = ()) -> bool:
    """Copy every file under the mirror folder ``relative`` into ``dest`` (keeping sub-folders; top-level entries
    named in ``skip`` left out), as :func:`copy_from_mirror` copies each file: for datasets whose file list
    depends on the dataset (OGB's). Returns False when the mirror has no folder ``relative``."""
    source = mirror_dir(relative)
    if source is None:
        return False
    for path in sorted(source.rglob("*")):
        part = path.relative_to(source)
        if path.is_file() and part.parts[0] not in skip:
            _copy_file(path, dest / part)
    return True


def _copy_file(source: Path, dest: Path) -> None:
    """Copy ``source``'s contents to ``dest`` when it is missing there, its size differs or ``source`` changed
    after the copy was made (a file of the same size with other contents was kept), through a temporary name
    renamed into place."""
    if dest.is_file():
        here, there = dest.stat(), source.stat()
        if here.st_size == there.st_size and here.st_mtime_ns >= there.st_mtime_ns:
            return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.tmp{os.getpid()}")
    try:
        shutil.copyfile(source, tmp)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def download_and_extract(url: str, folder: Path) -> None:
    """Fetch the zip at ``url`` into ``folder`` and extract it there. An archive already there (left by an
    interrupted fetch: PyG's ``download_url`` would reuse it forever) is removed first, and the archive is
    deleted whether the extraction succeeds or not."""
    from torch_geometric.data import download_url, extract_zip

    folder.mkdir(parents=True, exist_ok=True)
    (folder / url.rpartition("/")[2].split("?")[0]).unlink(missing_ok=True)
    archive = download_url(url, str(folder), log=False)
    try:
        extract_zip(archive, str(folder), log=False)
    finally:
        Path(archive).unlink(missing_ok=True)


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder/.lock`` (created with ``folder``): processes loading one dataset into
    one root wait for each other instead of reading files another is still writing (parallel seeds)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as handle:
        if fcntl is not None:
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_UN)
