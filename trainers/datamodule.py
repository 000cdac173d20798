"""Full-graph training data: the whole graph is the one batch of every epoch and every stage.

The batch (features, labels, :class:`graphfuse.Graph`, split masks) is built once in ``setup`` and moved to
the device once; every later epoch reuses the same device-resident batch, so the Graph's caches (CSR/CSC,
``gcn_norm``, ...) are built on the first epoch and reused ever after. :class:`SampledDataModule`
(trainers/sampled.py) reuses this batch for validation and test and samples the training batches.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from graphfuse.data import NodeDataset
from graphfuse.graph import Graph, cluster_order, permute_nodes


@dataclass(frozen=True)
class FullGraphBatch:
    """One full graph with its labels and split masks.

    Shapes:
        x: (N, F); y: (N,); graph: Graph of N nodes; train_mask, val_mask, test_mask: (N,) bool.
    """

    x: Tensor
    y: Tensor
    graph: Graph
    train_mask: Tensor
    val_mask: Tensor
    test_mask: Tensor

    @property
    def device(self) -> torch.device:
        return self.x.device

    def mask(self, stage: str) -> Tensor:
        """The mask of ``stage`` (``"train"``, ``"val"`` or ``"test"``)."""
        return getattr(self, f"{stage}_mask")

    def to(self, device: torch.device | str, non_blocking: bool = False) -> FullGraphBatch:
        """The batch on ``device`` (the Graph's cached formats move along)."""
        def move(t: Tensor) -> Tensor:
            return t.to(device, non_blocking=non_blocking)

        return FullGraphBatch(
            x=move(self.x), y=move(self.y), graph=self.graph.to(device, non_blocking=non_blocking),
            train_mask=move(self.train_mask), val_mask=move(self.val_mask), test_mask=move(self.test_mask),
        )


def mean_edge_weight(graph: Graph) -> Tensor:
    """``1 / in_deg(target)`` per edge: with these weights a weighted sum over in-edges is their mean.

    Shapes:
        → (E,) float32.
    """
    degree = graph.in_degree.to(torch.float32)
    return degree[graph.edge_index[1]].reciprocal()


def reordered(batch: FullGraphBatch) -> FullGraphBatch:
    """``batch`` with its nodes renumbered by :func:`graphfuse.graph.cluster_order` (computed on the batch's
    device); every per-node tensor is permuted along."""
    order = cluster_order(batch.graph)
    return FullGraphBatch(
        x=batch.x[order], y=batch.y[order], graph=permute_nodes(batch.graph, order),
        train_mask=batch.train_mask[order], val_mask=batch.val_mask[order], test_mask=batch.test_mask[order],
    )


def _identity(batch: FullGraphBatch) -> FullGraphBatch:
    return batch


class FullGraphDataModule(pl.LightningDataModule):
    """Serve ``dataset`` as a single full-graph batch to the train, val and test loops.

    Args:
        dataset: the loaded node-classification dataset.
        mean_weights: give the graph edge weights ``1 / in_deg(target)``, with which a layer summing weighted
            messages (``GraphSAINTConv(aggr="sum")``) takes the mean over in-neighbours.
        reorder: renumber the nodes by graph clustering (:func:`graphfuse.graph.cluster_order`) once, on the
            training device, so that neighbouring CSR rows share neighbours; features, labels and masks are
            permuted along, so every metric is unchanged. ``reorder_seconds`` records the one-off cost.
    """

    def __init__(self, dataset: NodeDataset, *, mean_weights: bool = False, reorder: bool = False) -> None:
        super().__init__()
        self.dataset = dataset
        self.mean_weights = mean_weights
        self.reorder = reorder
        self.reorder_seconds: float | None = None
        self.batch: FullGraphBatch | None = None
        self._device_batch: FullGraphBatch | None = None

    @property
    def num_features(self) -> int:
        return self.dataset.num_features

    @property
    def num_classes(self) -> int:
        return self.dataset.num_classes

    def setup(self, stage: str | None = None) -> None:
        if self.batch is not None:
            return
        ds = self.dataset
        graph = Graph(ds.edge_index, num_nodes=ds.num_nodes)
        if self.mean_weights:
            graph = Graph(ds.edge_index, num_nodes=ds.num_nodes, edge_weight=mean_edge_weight(graph))
        self.batch = FullGraphBatch(
            x=ds.x, y=ds.y, graph=graph,
            train_mask=ds.train_mask, val_mask=ds.val_mask, test_mask=ds.test_mask,
        )

    def _loader(self) -> DataLoader:
        if self.batch is None:
            self.setup()
        # a generator of its own: each iterator draws its base seed from it, not from torch's global one, whose
        # stream (dropout) would otherwise depend on how often validation ran
        return DataLoader([self.batch], batch_size=None, collate_fn=_identity, generator=torch.Generator())

    def train_dataloader(self) -> DataLoader:
        return self._loader()

    def val_dataloader(self) -> DataLoader:
        return self._loader()

    def test_dataloader(self) -> DataLoader:
        return self._loader()

    @torch.inference_mode(False)
    def device_batch(self, device: torch.device) -> FullGraphBatch:
        """The batch on ``device``, moved on the first call and reused after. Built outside inference mode, so
        that a batch first moved by ``Trainer.validate``/``test`` (which run in inference mode) can still be
        trained on."""
        if self.batch is None:
            self.setup()
        if self._device_batch is None or self._device_batch.device != torch.device(device):
            self._device_batch = self.batch.to(device)
            if self.reorder:
                start = time.perf_counter()
                self._device_batch = reordered(self._device_batch)
                if self._device_batch.device.type == "cuda":
                    torch.cuda.synchronize(self._device_batch.device)
                self.reorder_seconds = time.perf_counter() - start
        return self._device_batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        if isinstance(batch, FullGraphBatch):
            return self.device_batch(device)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)
