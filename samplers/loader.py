"""Loaders: iterables of :class:`~graphfuse.samplers.batch.Batch` that sample and gather on the graph's device.

:class:`SaintLoader` yields ``num_steps`` GraphSAINT subgraphs per epoch with their normalisation
coefficients; :class:`NeighborLoader` walks over input nodes in mini-batches of seeds, as PyG's loader of the
same name. Each owns a ``torch.Generator`` on the graph's device, seeded by ``seed``: two loaders built with
the same seed on the same device yield the same batches. Features, labels and other per-node tensors are
gathered with ``index_select`` where they live and moved to the graph's device (keep them there for speed).
A batch graph inherits the edge weights of the full graph (``edge_weight[e_id]``).

Example:
    >>> loader = NeighborLoader(graph, [15, 10], input_nodes=train_mask, batch_size=1024, shuffle=True,
    ...                         x=x, y=y, seed=0)
    >>> for batch in loader:
    ...     out = model(batch.x, batch.graph)[:batch.batch_size]
    ...     loss = F.cross_entropy(out, batch.y[:batch.batch_size])
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence

import torch
from torch import Tensor

from graphfuse.checks import check_bools, is_finite_real, is_int
from graphfuse.data.seeds import check_seed
from graphfuse.graph import CSR, Graph
from graphfuse.graph.convert import sorted_to_ptr
from graphfuse.samplers.batch import Batch
from graphfuse.samplers.neighbor import NeighborSampler
from graphfuse.samplers.saint import check_sampler
from graphfuse.samplers.saint_norm import (
    NORMS,
    SaintNorm,
    _check_train_mask,
    check_cache_dir,
    check_training_edges,
    compute_saint_norm,
    presampling_seed,
    training_subgraph,
)
from graphfuse.samplers.subgraph import _check_square, check_node_ids


def make_generator(device: torch.device, seed: int | None, owner: str = "make_generator") -> torch.Generator:
    """A generator on ``device`` seeded with ``seed``, or when None with a seed drawn from torch's global
    generator, so that ``torch.manual_seed`` makes the batches reproducible as it does PyG's loaders'; ``owner``
    leads the error message of a bad seed."""
    check_seed(owner, seed, none_ok=True)
    if seed is None:
        seed = int(torch.randint(0, 2**63 - 1, ()))
    generator = torch.Generator(device=device)
    generator.manual_seed(int(seed))  # the check takes NumPy integers; manual_seed takes an int only
    return generator


def _check_node_tensor(name: str, value: Tensor | None, num_nodes: int, loader: str) -> None:
    if value is None:
        return
    if not isinstance(value, Tensor):
        raise TypeError(f"{loader}: {name} must be a torch.Tensor; got {type(value).__name__}")
    if value.dim() < 1 or value.size(0) != num_nodes:
        raise ValueError(f"{loader}: {name} must be a tensor with {num_nodes} rows (one per node); got "
                         f"{tuple(value.shape)}")


RESERVED_NAMES = {*(f.name for f in dataclasses.fields(Batch)), *(n for n in dir(Batch) if not n.startswith("_")),
                  "edge_index", "edge_weight"}
"""Names a loader's ``node_data`` may not use: a Batch's fields, properties and methods, and the ``Data`` keys of
:meth:`Batch.to_pyg`."""


class _Gatherer:
    """Holds the per-node tensors of a loader and gathers them for a batch onto the graph's device."""

    def __init__(self, graph: Graph, x: Tensor | None, y: Tensor | None, node_data: Mapping[str, Tensor] | None,
                 loader: str) -> None:
        self.device = graph.device
        if node_data is not None and not isinstance(node_data, Mapping):
            raise TypeError(f"{loader}: node_data must be None or a mapping from name to tensor; got "
                            f"{type(node_data).__name__}")
        clash = sorted({"x", "y"} & set(node_data or {}))
        if clash:
            raise ValueError(f"{loader}: node_data must not hold {clash}: pass features and labels as x= and y=")
        clash = sorted(set(node_data or {}) & RESERVED_NAMES)
        if clash:  # batch.<name> would return the Batch's own field, and to_pyg() would overwrite it
            raise ValueError(f"{loader}: node_data names {clash} are taken by the batch itself; rename them")
        self.tensors = {"x": x, "y": y, **dict(node_data or {})}
        for name, value in self.tensors.items():
            _check_node_tensor(name, value, graph.num_nodes, loader)

    def gather(self, n_id: Tensor) -> dict[str, Tensor | None]:
        out: dict[str, Tensor | None] = {}
        for name, value in self.tensors.items():
            if value is None:
                out[name] = None
            elif value.device == n_id.device:
                out[name] = value.index_select(0, n_id)
            else:
                out[name] = value.index_select(0, n_id.to(value.device)).to(self.device, non_blocking=True)
        return out


def _target_sorted_graph(edge_index: Tensor, num_nodes: int, edge_weight: Tensor | None) -> Graph:
    """A Graph over edges already sorted by target, with its CSR filled in without a sort."""
    graph = Graph(edge_index, num_nodes=num_nodes, edge_weight=edge_weight, validate=False)
    src, dst = edge_index
    rowptr = sorted_to_ptr(dst, num_nodes)
    perm = torch.arange(edge_index.size(1), device=edge_index.device)
    graph.cached("csr", lambda: CSR(rowptr, src, perm, dst))
    return graph


class SaintLoader:
    """GraphSAINT mini-batches: ``num_steps`` independent subgraphs per epoch.

    Args:
        graph: the full graph, on the device to sample on.
        sampler: :class:`~graphfuse.samplers.SaintNodeSampler`, ``SaintEdgeSampler`` or
            ``SaintRandomWalkSampler``.
        x, y: node features and labels to gather (optional).
        node_data: other per-node tensors to gather, by name (e.g. ``{"train_mask": mask}``).
        num_steps: batches per epoch (``len(loader)``).
        sample_coverage: pre-sampling coverage of the normalisation; 0 gives batches without ``node_norm`` /
            ``edge_norm``.
        norm: ``"pyg"`` or ``"paper"``; ``"paper"`` also samples every batch from the training graph.
        train_mask: training nodes (needed for ``"paper"``; defaults to ``node_data["train_mask"]``); batches
            carry it as ``batch.train_mask`` in either case, so that a loss can be restricted to them.
        cache_dir: where normalisation coefficients are cached (None: not cached).
        seed: seeds the batch generator (None: a seed drawn from torch's global generator, which
            ``torch.manual_seed`` sets); the normalisation is pre-sampled with
            :func:`~graphfuse.samplers.presampling_seed` of it (of 0 when None), a different random
            stream, so the batches are not the pre-sampled subgraphs.
        normalize_edges: give each batch graph ``edge_weight = edge_norm · w`` (``w`` = the full graph's edge
            weight, 1 when it has none), ready for a layer aggregating with ``"sum"``; otherwise the batch
            graph inherits ``w``. ``batch.edge_norm`` is set either way.

    Shapes:
        x: (N, F); y: (N,); node_data values: (N, ...); train_mask: (N,) bool.
    """

    def __init__(
        self,
        graph: Graph,
        sampler,
        *,
        x: Tensor | None = None,
        y: Tensor | None = None,
        node_data: Mapping[str, Tensor] | None = None,
        num_steps: int = 1,
        sample_coverage: float = 0,
        norm: str = "pyg",
        train_mask: Tensor | None = None,
        cache_dir: str | os.PathLike | None = None,
        seed: int | None = None,
        normalize_edges: bool = False,
    ) -> None:
        _check_square(graph, "SaintLoader")
        check_sampler("SaintLoader", sampler, subgraphs=True)
        check_bools("SaintLoader", normalize_edges=normalize_edges)
        check_cache_dir("SaintLoader", cache_dir)
        if not is_int(num_steps) or num_steps < 1:
            raise ValueError(f"SaintLoader: num_steps must be an int ≥ 1; got {num_steps!r}")
        if norm not in NORMS:
            raise ValueError(f"SaintLoader: norm must be one of {list(NORMS)}; got {norm!r}")
        if not (is_finite_real(sample_coverage) and sample_coverage >= 0):
            raise ValueError(f"SaintLoader: sample_coverage must be a finite number ≥ 0; got {sample_coverage!r}")
        if train_mask is None and isinstance(node_data, Mapping):
            train_mask = node_data.get("train_mask")
        if train_mask is not None:  # in either norm: a NumPy mask was dropped, an int one indexed rows 0 and 1
            _check_train_mask("SaintLoader", graph, train_mask)
            if node_data is None or isinstance(node_data, Mapping):
                given = (node_data or {}).get("train_mask")
                if given is not None and given is not train_mask:
                    raise ValueError("SaintLoader: train_mask= and node_data['train_mask'] are different tensors; "
                                     "give the mask once")
                node_data = {**(node_data or {}), "train_mask": train_mask}  # batches carry it (it was dropped)
        if norm == "paper" and train_mask is None:
            raise ValueError("SaintLoader: norm='paper' samples from the training graph and needs train_mask")
        if normalize_edges and not sample_coverage > 0:
            raise ValueError("SaintLoader: normalize_edges needs the normalisation (sample_coverage > 0)")
        self.graph = graph
        self.normalize_edges = normalize_edges
        self.sampler = sampler
        self.num_steps = int(num_steps)
        self.norm = norm
        self.generator = make_generator(graph.device, seed, "SaintLoader")
        self._gatherer = _Gatherer(graph, x, y, node_data, "SaintLoader")
        self.training = training_subgraph(graph, train_mask) if norm == "paper" else None
        if self.training is not None:
            check_training_edges("SaintLoader", self.training.graph, sampler)
        elif graph.num_edges == 0 and sampler.name != "saint_rw":
            # refused here: it used to warn that no node can be drawn, then raise in the presampling or first batch
            raise ValueError(f"SaintLoader: the graph has no edges for the {sampler.name} sampler, which draws "
                             "edges (saint_rw starts walks at every node)")
        _warn_undrawable(graph, sampler, train_mask, self.training)
        self.saint_norm: SaintNorm | None = None
        if sample_coverage > 0:
            self.saint_norm = compute_saint_norm(
                graph, sampler, sample_coverage=sample_coverage, norm=norm, train_mask=train_mask,
                seed=presampling_seed(0 if seed is None else seed), cache_dir=cache_dir,
            )

    def __len__(self) -> int:
        return self.num_steps

    def __iter__(self) -> Iterator[Batch]:
        for _ in range(self.num_steps):
            yield self.sample()

    def sample(self) -> Batch:
        """Draw one batch."""
        if self.training is None:
            sub = self.sampler(self.graph, self.generator)
            n_id, e_id = sub.n_id, sub.e_id
        else:
            sub = self.sampler(self.training.graph, self.generator)
            n_id, e_id = self.training.sub.n_id[sub.n_id], self.training.sub.e_id[sub.e_id]
        gathered = self._gatherer.gather(n_id)
        x, y = gathered.pop("x"), gathered.pop("y")
        node_norm = edge_norm = None
        if self.saint_norm is not None:
            node_norm, edge_norm = self.saint_norm.node_norm[n_id], self.saint_norm.edge_norm[e_id]
        weight = None if self.graph.edge_weight is None else self.graph.edge_weight[e_id]
        if self.normalize_edges:
            weight = edge_norm if weight is None else edge_norm * weight
        return Batch(
            graph=_target_sorted_graph(sub.edge_index, sub.num_nodes, weight),
            n_id=n_id,
            e_id=e_id,
            x=x,
            y=y,
            node_data=gathered,
            batch_size=sub.num_nodes,
            node_norm=node_norm,
            edge_norm=edge_norm,
        )


def _warn_undrawable(graph: Graph, sampler, train_mask: Tensor | None, training) -> None:
    """Warn when training nodes have probability 0 under ``sampler``: the node and edge samplers keep only the
    endpoints of drawn edges, so a node without an (out-)edge in the graph they sample from (under
    norm='paper' the training subgraph, where many training nodes may be isolated) is never in a batch, and the
    loss, unbiased over the nodes that can be drawn, never sees its label."""
    drawable = getattr(sampler, "drawable", None)
    if drawable is None:
        return
    if training is not None:
        missed, total, where = int((~drawable(training.graph)).sum()), training.graph.num_nodes, \
            "the training subgraph (norm='paper': the edges between training nodes)"
    else:
        never = ~drawable(graph)
        if train_mask is not None:
            never = never & train_mask.to(graph.device)
        total = graph.num_nodes if train_mask is None else int(train_mask.sum())
        missed, where = int(never.sum()), "the graph"
    if missed:  # norm='paper' (training set) needs a train_mask: without one, every node counts
        nodes = "nodes" if train_mask is None else "training nodes"
        warnings.warn(f"SaintLoader: {missed} of {total} {nodes} can never be drawn by the {sampler.name} "
                      f"sampler, which keeps only endpoints of edges it draws: they have no "
                      f"{'out-edge' if sampler.name == 'saint_node' else 'edge'} in {where}, so no batch holds "
                      "them and the loss never sees their labels (saint_rw starts walks at every node)",
                      stacklevel=3)


class NeighborLoader:
    """Neighbour-sampled mini-batches over input nodes, as PyG's ``NeighborLoader``.

    Args:
        graph: the full graph, on the device to sample on.
        num_neighbors: fan-out per hop (−1 = all neighbours).
        input_nodes: seeds to iterate over: a (N,) bool mask, a 1-D tensor of ids, or None for all nodes.
        batch_size: seeds per batch.
        shuffle: visit the input nodes in a new random order each epoch.
        drop_last: drop the last batch when it has fewer than ``batch_size`` seeds.
        replace, subgraph_type, disjoint: see :class:`~graphfuse.samplers.NeighborSampler`.
        x, y, node_data: per-node tensors to gather.
        seed: seeds the loader's generator (shuffling and sampling); None: a seed drawn from torch's global
            generator, which ``torch.manual_seed`` sets.

    Shapes:
        input_nodes: (N,) bool or (B_total,) int64; x: (N, F); y: (N,).
    """

    def __init__(
        self,
        graph: Graph,
        num_neighbors: Sequence[int],
        *,
        input_nodes: Tensor | None = None,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        replace: bool = False,
        subgraph_type: str = "directional",
        disjoint: bool = False,
        x: Tensor | None = None,
        y: Tensor | None = None,
        node_data: Mapping[str, Tensor] | None = None,
        seed: int | None = None,
    ) -> None:
        _check_square(graph, "NeighborLoader")
        if not is_int(batch_size) or batch_size < 1:  # ValueError, as every count's check
            raise ValueError(f"NeighborLoader: batch_size must be an int ≥ 1; got {batch_size!r}")
        check_bools("NeighborLoader", shuffle=shuffle, drop_last=drop_last)
        self.graph = graph
        self.sampler = NeighborSampler(num_neighbors, replace=replace, subgraph_type=subgraph_type,
                                       disjoint=disjoint)
        self.input_nodes = self._input_nodes(graph, input_nodes)
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.generator = make_generator(graph.device, seed, "NeighborLoader")
        self._gatherer = _Gatherer(graph, x, y, node_data, "NeighborLoader")

    @staticmethod
    def _input_nodes(graph: Graph, input_nodes: Tensor | None) -> Tensor:
        device = graph.device
        if input_nodes is None:
            return torch.arange(graph.num_nodes, device=device)
        if not isinstance(input_nodes, Tensor) or input_nodes.dtype not in (torch.bool, torch.int64, torch.int32):
            raise TypeError("NeighborLoader: input_nodes must be a bool mask or an int64/int32 tensor of node ids; "
                            f"got {getattr(input_nodes, 'dtype', type(input_nodes).__name__)}")
        if input_nodes.dim() != 1:
            raise ValueError(f"NeighborLoader: input_nodes must be 1-D; got shape {tuple(input_nodes.shape)}")
        if input_nodes.dtype == torch.bool:
            if input_nodes.numel() != graph.num_nodes:
                raise ValueError(f"NeighborLoader: an input_nodes mask must have {graph.num_nodes} entries; got "
                                 f"{input_nodes.numel()}")
            return input_nodes.to(device).nonzero().view(-1)
        ids = check_node_ids("NeighborLoader", "input_nodes", input_nodes.to(device), graph)
        if graph.num_nodes > 2 and ids.numel() == graph.num_nodes and bool((ids <= 1).all()):
            raise ValueError(f"NeighborLoader: input_nodes holds {ids.numel()} ids, all 0 or 1: a 0/1 mask given as "
                             "integers? Pass it as a bool mask (mask.bool()), or node ids")
        return ids

    def __len__(self) -> int:
        count = self.input_nodes.numel() / self.batch_size
        return math.floor(count) if self.drop_last else math.ceil(count)

    def __iter__(self) -> Iterator[Batch]:
        total = self.input_nodes.numel()
        device = self.graph.device
        if self.shuffle:
            order = torch.randperm(total, device=device, generator=self.generator)
        else:
            order = torch.arange(total, device=device)
        for step in range(len(self)):
            input_id = order[step * self.batch_size:(step + 1) * self.batch_size]
            yield self.sample(self.input_nodes[input_id], input_id)

    def sample(self, seeds: Tensor, input_id: Tensor | None = None) -> Batch:
        """The batch of ``seeds`` (global node ids on the graph's device); ``input_id``, if given, holds one entry
        per seed (their positions in the loader's input nodes)."""
        if input_id is not None and input_id.shape != seeds.shape:
            raise ValueError(f"NeighborLoader.sample: input_id must have one entry per seed, shape "
                             f"{tuple(seeds.shape)}; got {tuple(input_id.shape)}")
        out = self.sampler(self.graph, seeds, self.generator)
        gathered = self._gatherer.gather(out.n_id)
        x, y = gathered.pop("x"), gathered.pop("y")
        weight = None if self.graph.edge_weight is None else self.graph.edge_weight[out.e_id]
        return Batch(
            graph=_target_sorted_graph(out.edge_index, out.num_nodes, weight),  # every subgraph type sorts by target
            n_id=out.n_id,
            e_id=out.e_id,
            x=x,
            y=y,
            node_data=gathered,
            batch_size=out.batch_size,
            num_sampled_nodes=out.num_sampled_nodes,
            num_sampled_edges=out.num_sampled_edges,
            batch=out.batch,
            input_id=input_id,
        )
