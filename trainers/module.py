"""The LightningModule of node classification: loss, metrics and optimiser around a plain ``nn.Module``.

One shared step serves train, val and test and both kinds of batch: run the model on the batch's graph, take
cross-entropy over the batch's target rows for that stage (:func:`target_rows`) and log ``{stage}/loss``,
``{stage}/acc`` and ``{stage}/f1_micro`` (plus ogb's official metric, ``{stage}/ogb_<metric>``, for ogbn-*
datasets). A full-graph batch's target rows are the stage's mask. A sampled batch's are its first
``batch_size`` nodes (the seeds of a neighbour batch, every node of a GraphSAINT batch) that are in the
stage's mask when the batch carries one (``train_mask``); a GraphSAINT batch's loss is
``Σ node_norm_v · loss_v`` over them (:func:`node_loss`): an unbiased estimate of the summed training loss
over the nodes the sampler can draw, divided by N (PyG's normalisation) or by the number of training nodes
(the paper's); the node and edge samplers cannot draw nodes without (out-)edges, which SaintLoader warns about.
An epoch's value of a logged number is the batches' values weighted by the rows each scored (not by the
subgraph's size); a GraphSAINT loss, an estimate of the whole by itself, counts once per batch. A training batch
without target rows and without ``node_norm`` is skipped (no step, nothing logged).
``train/epoch_time`` is the wall time of each training epoch (forward, backward and optimiser step;
validation excluded).
"""

from __future__ import annotations

import time
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score
from torchmetrics.functional.classification import multiclass_accuracy, multiclass_f1_score

from graphfuse.samplers import Batch
from graphfuse.trainers.datamodule import FullGraphBatch

STAGES = ("train", "val", "test")


def target_rows(batch: FullGraphBatch | Batch, stage: str) -> tuple[Tensor, Tensor | None]:
    """The rows of ``batch`` that ``stage``'s loss and metrics are taken over, and their loss weights.

    Returns:
        ``(mask, weight)``: a bool mask over the batch's nodes, and the per-row loss weights under the mask
        (GraphSAINT's ``node_norm``) or None for a plain mean.

    Shapes:
        mask: (n,) bool; weight: (number of rows in mask,) or None.
    """
    if isinstance(batch, FullGraphBatch):
        return batch.mask(stage), None
    mask = torch.zeros(batch.num_nodes, dtype=torch.bool, device=batch.y.device)
    mask[: batch.batch_size] = True
    stage_mask = batch.node_data.get(f"{stage}_mask")
    if stage_mask is not None:
        mask &= stage_mask
    return mask, None if batch.node_norm is None else batch.node_norm[mask]


def node_loss(logits: Tensor, target: Tensor, weight: Tensor | None = None) -> Tensor:
    """Cross-entropy: the mean over rows, or ``Σ weight · loss`` when ``weight`` (GraphSAINT's node_norm) is set.

    Shapes:
        logits: (n, C); target: (n,); weight: (n,) or None → scalar.
    """
    if weight is None:
        return F.cross_entropy(logits, target)
    return (F.cross_entropy(logits, target, reduction="none") * weight).sum()


class NodeClassifier(pl.LightningModule):
    """Train ``model`` to classify nodes with cross-entropy and Adam.

    Args:
        model: ``model(x, graph) -> logits``.
        num_classes: number of classes C.
        lr: Adam's learning rate.
        weight_decay: Adam's L2 weight decay.
        ogb_name: the OGB dataset name (e.g. ``"ogbn-arxiv"``) to also score with ogb's ``Evaluator``.
        config: the resolved run config (plain dict), stored in the checkpoints' hyper-parameters.

    Batches are :class:`~graphfuse.trainers.datamodule.FullGraphBatch` (full graph with split masks) or
    :class:`graphfuse.samplers.Batch` (a sampled subgraph); see :func:`target_rows`.

    Shapes:
        batch.x: (n, F); batch.y: (n,); logits: (n, C), n = N for full-graph batches.
    """

    def __init__(
        self,
        model: nn.Module,
        num_classes: int,
        lr: float = 0.01,
        weight_decay: float = 5e-4,
        ogb_name: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["model"])
        self.model = model
        self.num_classes = num_classes
        self.lr = lr
        self.weight_decay = weight_decay
        self.metrics = nn.ModuleDict()
        for stage in STAGES:
            self.metrics[f"{stage}_acc"] = MulticlassAccuracy(num_classes, average="micro")
            self.metrics[f"{stage}_f1_micro"] = MulticlassF1Score(num_classes, average="micro")
        self.evaluator = None
        if ogb_name is not None:
            from ogb.nodeproppred import Evaluator

            self.evaluator = Evaluator(name=ogb_name)
        self._epoch_start = 0.0
        self.last_epoch_time = float("nan")
        self.epoch_times: list[float] = []
        self.first_epoch: int | None = None

    def forward(self, x: Tensor, graph: Any) -> Tensor:
        return self.model(x, graph)

    def _shared_step(self, batch: FullGraphBatch | Batch, stage: str) -> Tensor | None:
        logits = self(batch.x, batch.graph)
        mask, weight = target_rows(batch, stage)
        logits, target = logits[mask], batch.y[mask]
        rows = target.numel()
        # The epoch value of a per-batch number is its mean weighted by the rows the batch scored (not by the
        # subgraph's size); a node_norm-weighted loss estimates the whole graph's loss by itself and counts once.
        log = {"on_step": False, "on_epoch": True}
        if stage == "train" and not rows:  # a sampled batch without target rows: nothing to learn or score
            if weight is not None:  # the weighted estimate of an empty sample is 0, and it counts once
                self.log("train/loss", logits.new_zeros(()), prog_bar=True, batch_size=1, **log)
            return None  # (its plain mean loss is NaN; the metrics failed on an empty update)
        loss = node_loss(logits, target, weight)
        pred = logits.argmax(dim=-1)
        self.log(f"{stage}/loss", loss, prog_bar=stage == "train", batch_size=rows if weight is None else 1, **log)
        for name in ("acc", "f1_micro"):
            metric = self.metrics[f"{stage}_{name}"]
            metric.update(pred, target)
            self.log(f"{stage}/{name}", metric, prog_bar=stage == "val" and name == "acc", batch_size=rows, **log)
        if self.evaluator is not None and rows:
            self.log(*self._ogb_score(stage, pred, target), batch_size=rows, **log)
        return loss

    def _ogb_score(self, stage: str, pred: Tensor, target: Tensor) -> tuple[str, float]:
        """ogb's official metric of ``pred`` against ``target``: its name (``{stage}/ogb_<metric>``) and value."""
        result = self.evaluator.eval({"y_true": target.unsqueeze(-1).cpu(), "y_pred": pred.unsqueeze(-1).cpu()})
        metric = self.evaluator.eval_metric
        return f"{stage}/ogb_{metric}", float(result[metric])

    def training_step(self, batch: FullGraphBatch | Batch, batch_idx: int) -> Tensor | None:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: FullGraphBatch | Batch, batch_idx: int) -> Tensor | None:
        return self._shared_step(batch, "val")

    def test_step(self, batch: FullGraphBatch | Batch, batch_idx: int) -> Tensor | None:
        return self._shared_step(batch, "test")

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Keep torch's random state (dropout's draws; the samplers re-seed per epoch on their own generators):
        a run resumed from this checkpoint goes on as the uninterrupted run would have."""
        checkpoint["rng_states"] = {
            "cpu": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else [],
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Restore torch's random state, and give the saved optimiser state this module's ``lr`` and
        ``weight_decay`` (Lightning restores the checkpoint's param groups: a resume's optim overrides were lost)."""
        for state in checkpoint.get("optimizer_states", []):
            for group in state["param_groups"]:
                group.update(lr=self.lr, weight_decay=self.weight_decay)
        states = checkpoint.get("rng_states")
        if states is None:  # a checkpoint written before the random state was kept
            return
        torch.set_rng_state(states["cpu"])
        if states["cuda"] and torch.cuda.is_available() and len(states["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states["cuda"])

    def on_train_start(self) -> None:
        self.first_epoch = self.current_epoch

    def on_train_epoch_start(self) -> None:
        self._epoch_start = time.perf_counter()

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.last_epoch_time = time.perf_counter() - self._epoch_start

    def on_train_epoch_end(self) -> None:
        self.epoch_times.append(self.last_epoch_time)
        self.log("train/epoch_time", self.last_epoch_time, on_step=False, on_epoch=True, batch_size=1)

    @torch.no_grad()
    def evaluate(self, batch: FullGraphBatch) -> dict[str, float]:
        """Loss, accuracy and F1-micro of every split in eval mode: ``{"train/acc": ..., "test/loss": ...}``, and
        ogb's metric for an ogbn-* dataset (``"test/ogb_acc"``)."""
        was_training = self.training
        self.eval()
        logits = self(batch.x, batch.graph)
        self.train(was_training)
        out: dict[str, float] = {}
        for stage in STAGES:
            mask = batch.mask(stage)
            target = batch.y[mask]
            pred = logits[mask].argmax(dim=-1)
            out[f"{stage}/loss"] = float(F.cross_entropy(logits[mask], target))
            out[f"{stage}/acc"] = float(multiclass_accuracy(pred, target, self.num_classes, average="micro"))
            out[f"{stage}/f1_micro"] = float(multiclass_f1_score(pred, target, self.num_classes, average="micro"))
            if self.evaluator is not None:
                name, value = self._ogb_score(stage, pred, target)
                out[name] = value
        return out

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.lr, weight_decay=self.weight_decay)
