"""GraphSAINT normalisation coefficients by pre-sampling, in PyG's and in the paper's convention.

Subgraphs are drawn until ``Σ |V_sub| ≥ N · sample_coverage``; the ``M`` subgraphs drawn give how often each
node (``C_v``) and each edge (``C_e``) was sampled. Subgraphs are drawn many at a time and counted on the
graph's device (:func:`count_saint_samples`); ``M`` stops exactly at the subgraph that reaches the coverage.

``norm="pyg"`` (PyG's ``GraphSAINTSampler``; samples from the whole graph, ``N`` = all nodes)::

    node_norm[v] = M / (C_v · N)                  (C_v = 0 counts as 0.1)
    edge_norm[e] = clamp(C_src(e) / C_e, 0, 1e4)  (0/0 → 0.1)

``norm="paper"`` (Zeng et al., ICLR 2020, and their code; samples from the subgraph induced by the training
nodes, ``N`` = |V_train|)::

    node_norm[v] = M / (C_v · |V_train|) for training nodes (C_v = 0 counts as 0.1), 0 elsewhere
    edge_norm[e] = clamp(C_dst(e) / C_e, 0, 1e4)  (0/0 → 0.1) on training edges, 0 elsewhere

Use: the loss of a subgraph is ``Σ_{v ∈ sub, v ∈ train} node_norm[v] · loss_v``; messages along edge ``e``
are scaled by ``edge_norm[e]`` on top of the layer's own normalisation. Conditional on the target ``i``
being sampled, the paper's ``C_dst / C_e`` makes ``Σ_{j→i sampled} edge_norm · x_j`` an unbiased estimate of
``Σ_{j→i} x_j``. PyG's ``C_src / C_e`` does this for the aggregation into each edge's *source* (node ``j``
collecting ``Σ_{j→i sampled} edge_norm · x_i``); on a symmetric graph it equals the paper's weight of the
reverse edge, and used for aggregation into targets it is biased wherever neighbours are sampled more or
less often than the target.

Coefficients are cached on disk (``torch.save``) under ``cache_dir`` in a file named after a digest of the
graph's fingerprint, the sampler and its parameters, the coverage, the convention, the training mask (paper)
and the seed; the file is reused on any device.

Shapes:
    node_norm, node_count: (N,); edge_norm, edge_count: (E,) in the graph's COO edge order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from torch import Tensor

from graphfuse.checks import is_finite_real, is_int
from graphfuse.data.paths import check_outside_mirror
from graphfuse.data.seeds import check_seed
from graphfuse.graph import Graph
from graphfuse.samplers.fingerprint import graph_fingerprint, tensor_fingerprint
from graphfuse.samplers.saint import check_sampler
from graphfuse.samplers.subgraph import Subgraph, _check_square, _induced_edges, owned_adjacency

logger = logging.getLogger(__name__)

NORMS = ("pyg", "paper")
_MAX_CANDIDATES = 1 << 26
_MAX_CHUNK = 1024
_BITMASK_GROUPS = 63
_EDGE_BLOCK = 1 << 25
# The on-disk cache's version, part of its key: raise it whenever the counting or the coefficients change, so that
# files written by an earlier graphfuse are not reused (1: the first versioned files).
CACHE_VERSION = 1
_STORED = ("node_norm", "edge_norm", "node_count", "edge_count", "num_samples", "norm")
# Elementwise passes per candidate edge ("candidates") and per edge and chunk of 63 subgraphs ("bitmask").
_CANDIDATE_COST = 12
_BITMASK_COST = 20


@dataclass(frozen=True)
class SaintNorm:
    """GraphSAINT loss (``node_norm``) and aggregation (``edge_norm``) coefficients and the counts behind them.

    Shapes:
        node_norm: (N,) float32; edge_norm: (E,) float32; node_count: (N,) int64; edge_count: (E,) int64.
    """

    node_norm: Tensor
    edge_norm: Tensor
    node_count: Tensor
    edge_count: Tensor
    num_samples: int
    norm: str

    def to(self, device: torch.device | str) -> SaintNorm:
        """The same coefficients on ``device``."""
        return dataclasses.replace(self, **{f: getattr(self, f).to(device) for f in
                                            ("node_norm", "edge_norm", "node_count", "edge_count")})


class TrainingSubgraph(NamedTuple):
    """The compact graph induced by the training nodes, and the :class:`Subgraph` mapping it back."""

    graph: Graph
    sub: Subgraph


def training_subgraph(graph: Graph, train_mask: Tensor) -> TrainingSubgraph:
    """The graph induced by the training nodes, relabelled to ``0..|V_train|-1`` (cached on ``graph``).

    Returns:
        ``(train_graph, sub)``: the compact training graph and the :class:`Subgraph` whose ``n_id`` / ``e_id``
        map its nodes and edges back to ``graph``.

    Shapes:
        train_mask: (N,) bool → train_graph with |V_train| nodes.
    """
    _check_square(graph, "training_subgraph")
    _check_train_mask("training_subgraph", graph, train_mask)

    def build() -> TrainingSubgraph:
        n_id = train_mask.to(graph.device).nonzero().view(-1)
        src, dst, e_id = _induced_edges(graph, n_id)
        sub = Subgraph(n_id=n_id, edge_index=torch.stack([src, dst]), e_id=e_id)
        return TrainingSubgraph(Graph(sub.edge_index, num_nodes=sub.num_nodes, validate=False), sub)

    return graph.cached(("saint_training_subgraph", tensor_fingerprint(train_mask)), build)


def popcount(x: Tensor) -> Tensor:
    """Number of set bits of each non-negative int64 (SWAR, exact in int64 arithmetic without overflow)."""
    x = x - ((x >> 1) & 0x5555555555555555)
    x = (x & 0x3333333333333333) + ((x >> 2) & 0x3333333333333333)
    x = (x + (x >> 4)) & 0x0F0F0F0F0F0F0F0F
    x = x + (x >> 8)
    x = x + (x >> 16)
    x = x + (x >> 32)
    return x & 0x7F


def _count_edges_by_bitmask(graph: Graph, nodes: Tensor, group: Tensor, edge_count: Tensor) -> None:
    """Add to ``edge_count`` how many groups (≤ 63 of them) hold both endpoints of every edge: one pass over
    the edge list with a per-node bitmask of groups, whatever the subgraphs' sizes."""
    bits = torch.zeros(graph.num_nodes, dtype=torch.int64, device=graph.device)
    bits.index_add_(0, nodes, torch.ones_like(group) << group)
    src, dst = graph.edge_index
    for begin in range(0, graph.num_edges, _EDGE_BLOCK):
        block = slice(begin, begin + _EDGE_BLOCK)
        edge_count[block] += popcount(bits[src[block]] & bits[dst[block]])


def _check_train_mask(name: str, graph: Graph, train_mask: object) -> None:
    """Raise unless ``train_mask`` is an (N,) bool tensor selecting at least one node."""
    if not isinstance(train_mask, Tensor):
        raise TypeError(f"{name}: train_mask must be a torch.Tensor; got {type(train_mask).__name__}")
    if train_mask.dtype != torch.bool or train_mask.shape != (graph.num_nodes,):
        raise ValueError(f"{name}: train_mask must be a ({graph.num_nodes},) bool tensor; got "
                         f"{tuple(train_mask.shape)} {train_mask.dtype}")
    if not bool(train_mask.any()):
        raise ValueError(f"{name}: train_mask selects no node")


def check_cache_dir(name: str, cache_dir: object) -> None:
    """Raise TypeError unless ``cache_dir`` is None, a str or an os.PathLike (pathlib's error named nothing), and
    ValueError when it, or the nearest part of it that exists, is not a folder (checked before any sampling)."""
    if cache_dir is None:
        return
    if not isinstance(cache_dir, (str, os.PathLike)):
        raise TypeError(f"{name}: cache_dir must be None, a str or a path; got {type(cache_dir).__name__}")
    existing = Path(cache_dir).expanduser().absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{name}: cache_dir must be a folder (or a path where one can be made); {existing} is a file")


def check_training_edges(name: str, train_graph: Graph, sampler) -> None:
    """Raise unless ``sampler`` can draw from the training graph of ``norm='paper'``: the node and edge samplers
    draw edges, and the graph has edges only where training nodes meet."""
    if train_graph.num_edges == 0 and sampler.name != "saint_rw":
        raise ValueError(f"{name}: norm='paper' samples from the training subgraph (the edges between training "
                         f"nodes), which has no edges for the {sampler.name} sampler")


def _check_coverage(name: str, sample_coverage: object) -> None:
    if not (is_finite_real(sample_coverage) and sample_coverage > 0):
        raise ValueError(f"{name}: sample_coverage must be a finite number > 0; got {sample_coverage!r}")


def count_saint_samples(
    graph: Graph,
    sampler,
    sample_coverage: float,
    generator: torch.Generator | None = None,
    *,
    method: str = "auto",
    chunk_size: int | None = None,
) -> tuple[Tensor, Tensor, int]:
    """Draw subgraphs with ``sampler`` until ``Σ |V_sub| ≥ N · sample_coverage`` and count them.

    Subgraphs are drawn ``chunk_size`` at a time. Edges are counted either from the kept nodes' owned edges
    (``"candidates"``, work ∝ the subgraphs' sizes; see :mod:`~graphfuse.samplers.subgraph`) or with a bitmask
    of up to 63 subgraphs per node and one pass over all E edges (``"bitmask"``, work ∝ E / 63 per subgraph).
    ``"auto"`` picks the cheaper from the owned-edge count of the subgraphs drawn so far.

    Args:
        graph: the graph sampled from (square, N ≥ 1 nodes).
        sampler: a GraphSAINT sampler (``draw(graph, num_samples, generator)``).
        sample_coverage: average number of times each node should be sampled (> 0).
        generator: random generator on the graph's device.
        method: ``"auto"``, ``"candidates"`` or ``"bitmask"``.
        chunk_size: subgraphs per draw (None: adaptive). Counts depend on it only through the random stream.

    Returns:
        ``(node_count, edge_count, num_samples)``: how many of the ``num_samples`` subgraphs hold each node
        and each edge.

    Shapes:
        node_count: (N,) int64; edge_count: (E,) int64.
    """
    _check_square(graph, "count_saint_samples")
    check_sampler("count_saint_samples", sampler)
    _check_coverage("count_saint_samples", sample_coverage)
    if chunk_size is not None and (not is_int(chunk_size) or chunk_size < 1):
        raise ValueError(f"count_saint_samples: chunk_size must be None or an int ≥ 1; got {chunk_size!r}")
    if method not in ("auto", "candidates", "bitmask"):
        raise ValueError(f"count_saint_samples: method must be 'auto', 'candidates' or 'bitmask'; got {method!r}")
    n, device = graph.num_nodes, graph.device
    if n == 0:
        raise ValueError("count_saint_samples: the graph has no nodes to sample")
    node_count = torch.zeros(n, dtype=torch.int64, device=device)
    edge_count = torch.zeros(graph.num_edges, dtype=torch.int64, device=device)
    target = math.ceil(n * sample_coverage)
    total = num_samples = 0
    owned = owned_adjacency(graph).ptr
    use_bitmask = method == "bitmask"
    chunk = 1 if chunk_size is None else int(chunk_size)  # None: one subgraph first, then adaptive
    while total < target:
        raw = sampler.draw(graph, chunk, generator)
        sample = torch.arange(chunk, device=device).view(-1, 1).expand_as(raw)
        keys = torch.unique(sample * n + raw)
        bounds = torch.searchsorted(keys, torch.arange(chunk + 1, device=device) * n)
        reached = total + torch.cumsum(bounds.diff(), 0)
        used = min(chunk, int(torch.searchsorted(reached, torch.tensor([target], device=device))) + 1)
        keys = keys[: int(bounds[used])]
        group, nodes = keys // n, keys % n
        node_count.index_add_(0, nodes, torch.ones_like(nodes))
        if use_bitmask:
            for first in range(0, used, _BITMASK_GROUPS):
                part = slice(int(bounds[first]), int(bounds[min(first + _BITMASK_GROUPS, used)]))
                _count_edges_by_bitmask(graph, nodes[part], group[part] - first, edge_count)
        else:
            _, _, e_id = _induced_edges(graph, nodes, group, ordered=False)
            edge_count.index_add_(0, e_id, torch.ones_like(e_id))
        total += int(bounds[used])
        num_samples += used
        candidates = max(int(owned[nodes + 1].sum() - owned[nodes].sum()) / used, 1.0)
        if method == "auto":
            use_bitmask = candidates * _BITMASK_GROUPS * _CANDIDATE_COST > graph.num_edges * _BITMASK_COST
        if chunk_size is None:
            chunk = _BITMASK_GROUPS if use_bitmask else max(1, min(_MAX_CHUNK, int(_MAX_CANDIDATES // candidates)))
    return node_count, edge_count, num_samples


def saint_norm_from_counts(
    graph: Graph, node_count: Tensor, edge_count: Tensor, num_samples: int, norm: str = "pyg",
    train_mask: Tensor | None = None,
) -> SaintNorm:
    """Coefficients from counts, by the formulas of the module docstring.

    Args:
        graph: the full graph (its COO edges index ``edge_count``).
        node_count, edge_count: sample counts over the full graph's node and edge ids (in ``"paper"``, zero
            outside the training graph).
        num_samples: M.
        norm: ``"pyg"`` or ``"paper"``.
        train_mask: the training nodes (``"paper"`` only).

    Shapes:
        node_count: (N,); edge_count: (E,); train_mask: (N,) bool.
    """
    if norm not in NORMS:
        raise ValueError(f"saint_norm_from_counts: norm must be one of {list(NORMS)}; got {norm!r}")
    for name, counts, size, unit in (("node_count", node_count, graph.num_nodes, "node"),
                                     ("edge_count", edge_count, graph.num_edges, "edge")):
        if not isinstance(counts, Tensor) or counts.shape != (size,):
            got = tuple(counts.shape) if isinstance(counts, Tensor) else type(counts).__name__
            raise ValueError(f"saint_norm_from_counts: {name} must be a ({size},) tensor, one count per {unit}; "
                             f"got {got}")
    if not is_int(num_samples) or num_samples < 1:
        raise ValueError(f"saint_norm_from_counts: num_samples must be an int ≥ 1 (the M of the formulas); got "
                         f"{num_samples!r}")
    for name, counts in (("node_count", node_count), ("edge_count", edge_count)):  # else: silently meaningless norms
        if counts.numel():
            lo, hi = int(counts.min()), int(counts.max())
            if lo < 0 or hi > num_samples:
                raise ValueError(f"saint_norm_from_counts: {name} must lie in [0, num_samples={num_samples}] (a "
                                 f"count of the M samples); got values in [{lo}, {hi}]")
    src, dst = graph.edge_index
    counts = node_count.to(torch.float64, copy=True)  # not the caller's tensor, even when it is float64
    endpoint = src if norm == "pyg" else dst
    edge_norm = (counts[endpoint] / edge_count.double()).clamp_(0, 1e4)
    edge_norm[torch.isnan(edge_norm)] = 0.1
    counts[counts == 0] = 0.1
    if norm == "pyg":
        node_norm = num_samples / counts / graph.num_nodes
    else:
        if train_mask is None:
            raise ValueError("saint_norm_from_counts: norm='paper' needs train_mask")
        _check_train_mask("saint_norm_from_counts", graph, train_mask)
        train_mask = train_mask.to(graph.device)
        node_norm = torch.where(train_mask, num_samples / counts / max(int(train_mask.sum()), 1), 0.0)
        edge_norm = torch.where(train_mask[src] & train_mask[dst], edge_norm, 0.0)
    return SaintNorm(node_norm=node_norm.float(), edge_norm=edge_norm.float(), node_count=node_count,
                     edge_count=edge_count, num_samples=num_samples, norm=norm)


def _cache_path(cache_dir: str | os.PathLike, graph: Graph, sampler, sample_coverage: float, norm: str,
                train_mask: Tensor | None, seed: int) -> tuple[Path, dict]:
    key = {
        "version": CACHE_VERSION,
        "graph": graph_fingerprint(graph),
        "sampler": sampler.name,
        "params": dataclasses.asdict(sampler),
        "sample_coverage": float(sample_coverage),
        "norm": norm,
        "train_mask": tensor_fingerprint(train_mask) if norm == "paper" else None,
        "seed": seed,
    }
    digest = hashlib.blake2b(json.dumps(key, sort_keys=True).encode(), digest_size=12).hexdigest()
    return Path(cache_dir).expanduser() / f"{sampler.name}_{norm}_{digest}.pt", key


def _load_cached(path: Path, key: dict, graph: Graph) -> SaintNorm | None:
    """The coefficients cached at ``path`` when the file is readable and was written for ``key`` with one
    coefficient per node and edge of ``graph``; else None (logged), and the caller computes them again and
    overwrites the file."""
    try:
        stored = torch.load(path, map_location=graph.device, weights_only=True)
    except (OSError, RuntimeError, EOFError, KeyError, ValueError, pickle.UnpicklingError):
        # torch's legacy reader raises KeyError or ValueError on a file that is no torch file at all
        logger.warning("GraphSAINT normalisation: ignoring unreadable cache %s", path)
        return None
    if (not isinstance(stored, dict) or stored.get("key") != json.dumps(key, sort_keys=True)
            or not set(_STORED) <= stored.keys()
            or tuple(stored["node_norm"].shape) != (graph.num_nodes,)
            or tuple(stored["edge_norm"].shape) != (graph.num_edges,)):
        logger.warning("GraphSAINT normalisation: ignoring cache %s, written for other settings", path)
        return None
    logger.info("GraphSAINT normalisation loaded from %s", path)
    return SaintNorm(**{k: stored[k] for k in _STORED})


def _save_cached(path: Path, key: dict, result: SaintNorm, device: torch.device) -> None:
    """Write ``result`` to ``path`` atomically (a temporary file renamed over it, removed if the write fails)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stored = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
    stored = {k: v.cpu() if isinstance(v, Tensor) else v for k, v in stored.items()}
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    try:
        torch.save({**stored, "key": json.dumps(key, sort_keys=True), "device": str(device)}, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    logger.info("GraphSAINT normalisation (%d subgraphs) cached in %s", result.num_samples, path)


def presampling_seed(seed: int) -> int:
    """The pre-sampling seed a loader seeded with ``seed`` uses: a digest of it in [0, 2**63), so that the
    pre-sampling stream is not the loader's batch stream (with one seed, the first batches would be the first
    pre-sampled subgraphs, whose nodes are then certain to have non-zero counts), nor a trainer's epoch stream.
    Seeds equal modulo 2**64 (as ``torch.manual_seed`` reads them, e.g. -1 and 2**64 - 1) give the same digest."""
    digest = hashlib.blake2b(f"graphfuse.saint_norm:{int(seed) % 2**64}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def compute_saint_norm(
    graph: Graph,
    sampler,
    *,
    sample_coverage: float,
    norm: str = "pyg",
    train_mask: Tensor | None = None,
    seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
) -> SaintNorm:
    """GraphSAINT normalisation for ``sampler`` on ``graph``, loaded from ``cache_dir`` when computed before.

    Args:
        graph: the full graph (square).
        sampler: a GraphSAINT sampler (:class:`~graphfuse.samplers.SaintRandomWalkSampler`, ...).
        sample_coverage: pre-sample until each node was drawn this many times on average (> 0).
        norm: ``"pyg"`` (sample the whole graph) or ``"paper"`` (sample the training graph).
        train_mask: training nodes, an (N,) bool tensor; required for ``"paper"`` (ignored for ``"pyg"``).
        seed: seed of the pre-sampling generator (on the graph's device).
        cache_dir: folder for the cached coefficients (not inside ``$GRAPHFUSE_DATA_MIRROR``, which is only
            read); None disables the cache.

    Returns:
        :class:`SaintNorm` on the graph's device, indexed by ``graph``'s node and edge ids.

    Example:
        >>> sn = compute_saint_norm(g, SaintRandomWalkSampler(roots=3000, walk_length=2), sample_coverage=50)
        >>> # batch from SaintLoader(..., train_mask=train_mask), which gives batches their train_mask
        >>> loss = (sn.node_norm[batch.n_id] * per_node_loss)[batch.train_mask].sum()
    """
    _check_square(graph, "compute_saint_norm")
    check_sampler("compute_saint_norm", sampler)
    _check_coverage("compute_saint_norm", sample_coverage)
    check_seed("compute_saint_norm", seed)
    seed = int(seed)
    if norm not in NORMS:
        raise ValueError(f"compute_saint_norm: norm must be one of {list(NORMS)}; got {norm!r}")
    check_cache_dir("compute_saint_norm", cache_dir)
    if norm == "paper":
        if train_mask is None:
            raise ValueError("compute_saint_norm: norm='paper' samples from the training graph and needs train_mask")
        _check_train_mask("compute_saint_norm", graph, train_mask)
        check_training_edges("compute_saint_norm", training_subgraph(graph, train_mask).graph, sampler)
    path = key = None
    if cache_dir is not None:
        check_outside_mirror(cache_dir, "compute_saint_norm: cache_dir", "choose a cache_dir outside it")
        path, key = _cache_path(cache_dir, graph, sampler, sample_coverage, norm, train_mask, seed)
        cached = _load_cached(path, key, graph) if path.exists() else None
        if cached is not None:
            return cached
    generator = torch.Generator(device=graph.device).manual_seed(seed)
    if norm == "pyg":
        node_count, edge_count, num_samples = count_saint_samples(graph, sampler, sample_coverage, generator)
    else:
        train_graph, sub = training_subgraph(graph, train_mask.to(graph.device))
        counts = count_saint_samples(train_graph, sampler, sample_coverage, generator)
        node_count = torch.zeros(graph.num_nodes, dtype=torch.int64, device=graph.device)
        edge_count = torch.zeros(graph.num_edges, dtype=torch.int64, device=graph.device)
        node_count[sub.n_id] = counts[0]
        edge_count[sub.e_id] = counts[1]
        num_samples = counts[2]
    result = saint_norm_from_counts(graph, node_count, edge_count, num_samples, norm, train_mask)
    if path is not None:
        _save_cached(path, key, result, graph.device)
    return result
