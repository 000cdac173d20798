"""The dataset registry and :func:`load_dataset`, the one entry point the rest of graphfuse uses.

A loader is a function ``loader(name, root, **options) -> NodeDataset`` registered under a name (or a
prefix pattern ending in ``*``, such as ``"ogbn-*"``) with :func:`register_dataset`. Its keyword-only
parameters are the dataset's options: :func:`load_dataset` checks option names against them before calling.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from graphfuse.data.dataset import NodeDataset
from graphfuse.data.paths import ROOT_ENV, check_outside_mirror, default_root
from graphfuse.data.transforms import normalize_features as _normalize_features

Loader = Callable[..., NodeDataset]

DATASETS: dict[str, Loader] = {}


def register_dataset(name: str) -> Callable[[Loader], Loader]:
    """Decorator registering ``loader(name, root, **options)`` under ``name`` (``"prefix-*"`` for a family).

    Example:
        >>> @register_dataset("toy")
        ... def load_toy(name, root, *, size=10): ...
    """
    key = name.lower()

    def decorate(loader: Loader) -> Loader:
        if key in DATASETS:
            raise ValueError(f"register_dataset: name {name!r} is already registered")
        DATASETS[key] = loader
        return loader

    return decorate


def resolve_loader(name: str) -> Loader:
    """The loader for ``name``: an exact registry entry, else the longest matching ``prefix*`` entry."""
    if not isinstance(name, str):
        raise TypeError(f"load_dataset: name must be a str; got {name!r}")
    key = name.lower()
    if key in DATASETS:
        return DATASETS[key]
    prefixes = [k for k in DATASETS if k.endswith("*") and key.startswith(k[:-1]) and len(key) > len(k) - 1]
    if prefixes:
        return DATASETS[max(prefixes, key=len)]
    raise ValueError(f"load_dataset: unknown dataset name {name!r}; registered names: "
                     f"{', '.join(sorted(DATASETS))}")


def dataset_options(name: str) -> dict[str, Any]:
    """The options ``name`` accepts, with their defaults."""
    params = inspect.signature(resolve_loader(name)).parameters.values()
    return {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}


def load_dataset(
    name: str,
    root: str | os.PathLike | None = None,
    *,
    normalize_features: bool = False,
    **options: Any,
) -> NodeDataset:
    """Load a registered node-classification dataset.

    Args:
        name: "cora", "facebook", "synthetic" or "ogbn-<name>" (case-insensitive); see ``DATASETS``.
        root: cache folder for raw and processed files; defaults to :func:`default_root` (also when "").
        normalize_features: row-normalise x (see :func:`graphfuse.data.transforms.normalize_features`).
        **options: dataset-specific options (e.g. ``num_nodes=`` for "synthetic"); unknown names raise.

    Returns:
        The dataset, with tensors on CPU (on the ``device`` option for "synthetic").

    Raises:
        ValueError: ``name`` is not registered, or ``root`` lies inside ``$GRAPHFUSE_DATA_MIRROR``.
        TypeError: ``name`` is not a str, ``root`` not a path, an option is not accepted by that dataset, or a
            yes/no option (``normalize_features``, ``download``, ...) is not a bool.
        DatasetNotFoundError: the files are absent and cannot be downloaded.

    Shapes:
        See :class:`NodeDataset`.
    """
    loader = resolve_loader(name)
    if root is not None and not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"load_dataset: root must be a path (str or os.PathLike) or None; got {root!r}")
    valid = dataset_options(name)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        listing = ", ".join(f"{k}={v!r}" for k, v in valid.items()) or "none"
        raise TypeError(f"load_dataset: unknown option(s) {', '.join(map(repr, unknown))} for dataset "
                        f"{name!r}; valid options: {listing}")
    switches = {"normalize_features": normalize_features,
                **{key: value for key, value in options.items() if isinstance(valid[key], bool)}}
    for key, value in switches.items():  # a string such as "no" would be truthy
        if not isinstance(value, bool):
            raise TypeError(f"load_dataset: {key} must be True or False for dataset {name!r}; got {value!r}")
    root = Path(root).expanduser() if root not in (None, "") else default_root()  # "" as the GraphSAINT cache reads it
    check_outside_mirror(root, "load_dataset: root", f"choose a root outside it (the root argument or data.root, "
                         f"else ${ROOT_ENV}, else ~/.cache/graphfuse/datasets)")
    dataset = loader(name.lower(), root, **options)
    if normalize_features:
        _normalize_features(dataset.x)
    return dataset
