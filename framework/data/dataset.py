"""The node-classification dataset every loader returns.

Shapes:
    x: (N, F) float32 node features.
    y: (N,) int64 class labels in [0, num_classes); -1 marks an unlabelled node (in no split).
    edge_index: (2, E) int64 COO, row 0 = source, row 1 = target; undirected graphs store both directions.
    train_mask, val_mask, test_mask: (N,) bool, pairwise disjoint.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from graphfuse.checks import is_int


@dataclass
class NodeDataset:
    """One graph with node features, labels and a train/val/test split.

    Args:
        name: registry name the dataset was loaded by ("cora", "facebook", "ogbn-arxiv", ...).
        x: (N, F) float32 features.
        y: (N,) int64 labels.
        edge_index: (2, E) int64 edges.
        train_mask, val_mask, test_mask: (N,) bool split masks.
        num_classes: number of classes.
        ogb_name: the OGB dataset name for ogbn-* datasets (the trainer then scores with ogb's Evaluator),
            else None.

    Shapes:
        x: (N, F); y: (N,); edge_index: (2, E); masks: (N,).
    """

    name: str
    x: Tensor
    y: Tensor
    edge_index: Tensor
    train_mask: Tensor
    val_mask: Tensor
    test_mask: Tensor
    num_classes: int
    ogb_name: str | None = None

    def __post_init__(self) -> None:
        tensors = {key: getattr(self, key) for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask")}
        for key, value in tensors.items():
            if not isinstance(value, Tensor):
                raise TypeError(f"NodeDataset: {key} must be a torch.Tensor; got {type(value).__name__}")
        if len({t.device for t in tensors.values()}) > 1:
            placed = ", ".join(f"{key} on {t.device}" for key, t in tensors.items())
            raise ValueError(f"NodeDataset: every tensor must be on one device; got {placed}")
        n = self.x.size(0) if self.x.dim() == 2 else -1
        if self.x.dim() != 2 or self.x.dtype != torch.float32:
            raise ValueError(f"NodeDataset: x must be a (N, F) float32 tensor; got {tuple(self.x.shape)} "
                             f"{self.x.dtype}")
        if self.y.shape != (n,) or self.y.dtype != torch.int64:
            raise ValueError(f"NodeDataset: y must be a ({n},) int64 tensor; got {tuple(self.y.shape)} "
                             f"{self.y.dtype}")
        if self.edge_index.dim() != 2 or self.edge_index.size(0) != 2 or self.edge_index.dtype != torch.int64:
            raise ValueError(f"NodeDataset: edge_index must be a (2, E) int64 tensor; got "
                             f"{tuple(self.edge_index.shape)} {self.edge_index.dtype}")
        for key in ("train_mask", "val_mask", "test_mask"):
            mask = getattr(self, key)
            if mask.shape != (n,) or mask.dtype != torch.bool:
                raise ValueError(f"NodeDataset: {key} must be a ({n},) bool tensor; got {tuple(mask.shape)} "
                                 f"{mask.dtype}")
        self._check_values(n)

    def _check_values(self, n: int) -> None:
        """The documented invariants on values (a custom loader's split leaking test nodes into training, or
        labels past num_classes, were taken as they came)."""
        if not is_int(self.num_classes) or self.num_classes < 1:
            raise ValueError(f"NodeDataset: num_classes must be an int >= 1; got {self.num_classes!r}")
        if self.edge_index.numel() and (int(self.edge_index.min()) < 0 or int(self.edge_index.max()) >= n):
            raise ValueError(f"NodeDataset: edge_index ids must lie in [0, N={n}); got [{int(self.edge_index.min())}, "
                             f"{int(self.edge_index.max())}]")
        labelled = self.y >= 0
        if self.y.numel() and (int(self.y.min()) < -1 or int(self.y.max()) >= self.num_classes):
            raise ValueError(f"NodeDataset: y must lie in [0, num_classes={self.num_classes}) or be -1 (unlabelled); "
                             f"got [{int(self.y.min())}, {int(self.y.max())}]")
        masks = {key: getattr(self, key) for key in ("train_mask", "val_mask", "test_mask")}
        for (a, mask_a), (b, mask_b) in itertools.combinations(masks.items(), 2):
            if bool((mask_a & mask_b).any()):
                raise ValueError(f"NodeDataset: {a} and {b} must be disjoint; {int((mask_a & mask_b).sum())} "
                                 "nodes are in both")
        for key, mask in masks.items():
            if bool((mask & ~labelled).any()):
                raise ValueError(f"NodeDataset: {key} holds {int((mask & ~labelled).sum())} unlabelled nodes "
                                 "(y = -1)")

    @property
    def num_nodes(self) -> int:
        """N."""
        return self.x.size(0)

    @property
    def num_features(self) -> int:
        """F."""
        return self.x.size(1)

    @property
    def num_edges(self) -> int:
        """E (directed; an undirected edge counts twice)."""
        return self.edge_index.size(1)

    def to(self, device: torch.device | str) -> NodeDataset:
        """A copy with every tensor moved to ``device``."""
        moved: dict[str, Any] = {
            f.name: (v.to(device) if isinstance(v := getattr(self, f.name), Tensor) else v)
            for f in dataclasses.fields(self)
        }
        return NodeDataset(**moved)

    def to_pyg(self) -> Any:
        """A ``torch_geometric.data.Data`` with x, y, edge_index and the three masks (tensors shared)."""
        from torch_geometric.data import Data

        return Data(x=self.x, y=self.y, edge_index=self.edge_index, train_mask=self.train_mask,
                    val_mask=self.val_mask, test_mask=self.test_mask, num_nodes=self.num_nodes)

    def __repr__(self) -> str:
        return (f"NodeDataset(name={self.name!r}, num_nodes={self.num_nodes}, num_edges={self.num_edges}, "
                f"num_features={self.num_features}, num_classes={self.num_classes}, "
                f"split=({int(self.train_mask.sum())}, {int(self.val_mask.sum())}, "
                f"{int(self.test_mask.sum())}))")
