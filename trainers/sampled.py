"""Sampled training data: GraphSAINT or neighbour-sampled training batches, full-graph validation and test.

:class:`SampledDataModule` is a :class:`~graphfuse.trainers.datamodule.FullGraphDataModule` whose training
loader is a ``graphfuse.samplers`` loader: :class:`~graphfuse.samplers.SaintLoader` (``saint_rw``,
``saint_node``, ``saint_edge``: ``num_steps`` subgraphs per epoch) or :class:`~graphfuse.samplers.NeighborLoader`
(``neighbor``: the training nodes in batches of seeds). Validation and test keep the parent's single full-graph
batch. Evaluation is full-graph, not layer-wise: its memory is that of one full-graph forward pass without
gradients (a few GiB at ogbn-products scale with hidden width 256), which the GPUs this targets hold.

The training loader is built in ``train_dataloader`` on the training device (``trainer.strategy.root_device``),
so the sampler's generator, the graph and the gathered features live there and batches arrive on the device;
GraphSAINT's normalisation is pre-sampled there too (and cached on disk, see
:func:`~graphfuse.samplers.compute_saint_norm`). At the start of every epoch the loader's generator is
re-seeded from ``(seed, epoch)``, so a resumed run draws the batches the uninterrupted run would have drawn.

Edge weights (``mean_weights``): a GraphSAINT model aggregating with ``"sum"`` reads the graph's edge weights
``w``; with ``w = 1 / in_deg(target)`` its sum is the paper's mean aggregator on the full graph (validation and
test). In training batches the SaintLoader multiplies ``w[e_id]`` by ``edge_norm`` (``aggr_norm``). With
``norm="paper"`` the training ``w`` is ``1 / deg_train(target)`` on the edges between training nodes (the
reference code's normalised training adjacency), while evaluation keeps the full graph's ``1 / in_deg``.

Shapes:
    edge weights: (E,) float32 in the dataset's COO edge order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor

from graphfuse.data import NodeDataset
from graphfuse.data.seeds import check_seed
from graphfuse.graph import Graph
from graphfuse.samplers import SAINT_SAMPLERS, Batch, NeighborLoader, SaintLoader, training_subgraph
from graphfuse.trainers.datamodule import FullGraphDataModule, mean_edge_weight

SAINT_LOADER_ARGS = ("num_steps", "sample_coverage", "norm")
"""SaintLoader keyword arguments taken from the sampler section."""
NEIGHBOR_LOADER_ARGS = ("num_neighbors", "batch_size", "replace", "subgraph_type", "disjoint", "shuffle",
                        "drop_last")
"""NeighborLoader keyword arguments taken from the sampler section."""


def training_mean_edge_weight(graph: Graph, train_mask: Tensor) -> Tensor:
    """``1 / deg_train(target)`` on the edges between training nodes (degrees in the graph they induce), 0 on
    every other edge: the mean over a node's training in-neighbours.

    Shapes:
        train_mask: (N,) bool → (E,) float32.
    """
    train_graph, sub = training_subgraph(graph, train_mask)
    weight = torch.zeros(graph.num_edges, dtype=torch.float32, device=graph.device)
    weight[sub.e_id] = mean_edge_weight(train_graph)
    return weight


def epoch_seed(seed: int, epoch: int) -> int:
    """The generator seed of ``epoch`` in a run seeded with ``seed``: distinct for every pair with seed < 2**44
    and epoch < 2**20, and in torch's seed range for any seed (seeds from 2**44 overflowed it, review)."""
    return ((seed << 20) + epoch) % 2**64


class EpochSeededLoader:
    """A sampling loader whose generator is re-seeded with :func:`epoch_seed` each time it is iterated.

    Args:
        loader: a SaintLoader or NeighborLoader.
        seed: the run's seed.
        epoch: returns the epoch about to start (the Lightning trainer's ``current_epoch``), or None without a
            trainer: then the passes over the loader are counted (each pass draws new batches).
    """

    def __init__(self, loader: SaintLoader | NeighborLoader, seed: int, epoch: Callable[[], int | None]) -> None:
        self.loader = loader
        self.seed = seed
        self.epoch = epoch
        self.passes = 0

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Batch]:
        # A generator: the seed is read when the first batch is drawn, after Lightning has restored the epoch
        # counter of a resumed run (it creates the iterator before that).
        epoch = self.epoch()
        self.loader.generator.manual_seed(epoch_seed(self.seed, self.passes if epoch is None else epoch))
        self.passes += 1
        yield from self.loader


class SampledDataModule(FullGraphDataModule):
    """Training batches from a sampler; validation and test on the full graph.

    Args:
        dataset: the loaded node-classification dataset.
        sampler: ``"saint_rw"``, ``"saint_node"``, ``"saint_edge"`` or ``"neighbor"``.
        sampler_args: keyword arguments of the GraphSAINT sampler class (``roots``/``walk_length`` or
            ``budget``); empty for ``"neighbor"``.
        loader_args: keyword arguments of the loader (:data:`SAINT_LOADER_ARGS` plus ``normalize_edges``, or
            :data:`NEIGHBOR_LOADER_ARGS`).
        mean_weights: give the graphs the edge weights of a mean aggregation (see the module docstring);
            GraphSAINT samplers only.
        seed: seeds the loader's generator (per epoch) and GraphSAINT's normalisation pre-sampling.
        cache_dir: where GraphSAINT normalisation coefficients are cached (None: not cached).
    """

    def __init__(
        self,
        dataset: NodeDataset,
        sampler: str,
        sampler_args: Mapping[str, Any] | None = None,
        loader_args: Mapping[str, Any] | None = None,
        *,
        mean_weights: bool = False,
        seed: int = 0,
        cache_dir: str | os.PathLike | None = None,
    ) -> None:
        check_seed("SampledDataModule", seed)
        if sampler != "neighbor" and sampler not in SAINT_SAMPLERS:
            raise ValueError(f"SampledDataModule: sampler must be one of {['neighbor', *SAINT_SAMPLERS]}; "
                             f"got {sampler!r}")
        if sampler == "neighbor" and mean_weights:
            raise ValueError("SampledDataModule: mean_weights does not apply to neighbour batches (a sum with "
                             "full-graph mean weights over sampled neighbours is biased); aggregate with a mean")
        super().__init__(dataset, mean_weights=mean_weights)
        self.sampler = sampler
        self.sampler_args = dict(sampler_args or {})
        self.loader_args = dict(loader_args or {})
        self.seed = seed
        self.cache_dir = cache_dir
        self._train_loader: EpochSeededLoader | None = None

    def _current_epoch(self) -> int | None:
        return self.trainer.current_epoch if self.trainer is not None else None

    def _training_device(self) -> torch.device:
        return self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu")

    def build_loader(self, device: torch.device) -> SaintLoader | NeighborLoader:
        """The training loader, sampling on ``device`` from the full-graph batch that validation and test use
        there (one copy of the edges and their formats on the device, not one per loop)."""
        batch = self.device_batch(device)
        graph, train_mask, x, y = batch.graph, batch.train_mask, batch.x, batch.y
        if self.sampler == "neighbor":
            return NeighborLoader(graph, input_nodes=train_mask, x=x, y=y, seed=self.seed, **self.loader_args)
        if self.mean_weights and self.loader_args.get("norm") == "paper":  # else the batch's mean weights
            graph = Graph(graph.edge_index, num_nodes=graph.num_nodes, validate=False,
                          edge_weight=training_mean_edge_weight(graph, train_mask))
        sampler = SAINT_SAMPLERS[self.sampler](**self.sampler_args)
        return SaintLoader(graph, sampler, x=x, y=y, node_data={"train_mask": train_mask}, seed=self.seed,
                           cache_dir=self.cache_dir, **self.loader_args)

    def train_dataloader(self) -> Iterable[Batch]:
        device = self._training_device()
        if self._train_loader is None or self._train_loader.loader.graph.device != device:
            self._train_loader = EpochSeededLoader(self.build_loader(device), self.seed, self._current_epoch)
        return self._train_loader
