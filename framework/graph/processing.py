"""The graph-processing stage: format conversion, self-loops and normalisation, one set of functions for
every device.

On CPU (and wherever no fused stage is registered) these run the reference of :mod:`graphfuse.graph.norm` /
:mod:`graphfuse.graph.convert`, unchanged. On CUDA they run the fused GPU stage (fuseGNN's "fused graph
processing", kernels/graph_processing.cu), registered by :mod:`graphfuse.engine.graph_stage` through
:func:`register_stage`: one counting-sort pipeline builds the new COO, its values, CSR, CSC and the CSR→CSC
permutation together, and the result comes back with those formats already cached on it. Results equal the
reference exactly in structure and permutation, values to rounding.

Caching policy: the ``process_*`` functions cache the processed graph on the input :class:`Graph` (under the
keys the layers use), so full-graph training builds it once; a sampled batch is a new Graph each step and is
processed on the fly by the same call. The plain functions (``gcn_norm``, ...) never cache.

Shapes:
    A graph with E edges becomes one with E' = E - (self-loops) + N edges when self-loops are added.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from graphfuse.checks import check_bools, check_finite_real
from graphfuse.graph import norm as reference
from graphfuse.graph.graph import Graph

STAGE_BACKENDS = ("auto", "reference", "fused")
NORMS = ("none", "gcn", "mean")


@dataclass(frozen=True)
class Stage:
    """A fused processing stage for one device type.

    Attributes:
        run: ``run(graph, self_loops, fill_value, norm) -> Graph`` with the semantics of :func:`process_graph`.
        is_available: whether its runtime (e.g. CuPy) can be used here.
    """

    run: Callable[[Graph, bool, float, str], Graph]
    is_available: Callable[[], bool]


_STAGES: dict[str, Stage] = {}


def register_stage(device_type: str, stage: Stage) -> None:
    """Make ``stage`` the fused processing stage for graphs on ``device_type`` (e.g. ``"cuda"``)."""
    if not isinstance(device_type, str):
        raise TypeError(f"register_stage: device_type must be a device type (str); got {type(device_type).__name__}")
    if not isinstance(stage, Stage):
        raise TypeError(f"register_stage: stage must be a graphfuse Stage; got {type(stage).__name__}")
    _STAGES[device_type] = stage


def _check_backend(op: str, backend: object) -> str:
    """``backend`` (None: ``"auto"``), checked against ``STAGE_BACKENDS``."""
    backend = "auto" if backend is None else backend
    if not isinstance(backend, str):
        raise TypeError(f"{op}: backend must be a backend name (str); got {type(backend).__name__}")
    if backend not in STAGE_BACKENDS:
        raise ValueError(f"{op}: backend must be one of {list(STAGE_BACKENDS)}; got {backend!r}")
    return backend


def _fused(op: str, graph: Graph, backend: str | None) -> Stage | None:
    """The fused stage to use for ``graph``, or None for the reference."""
    backend = _check_backend(op, backend)
    if backend == "reference":
        return None
    if _learned(graph):  # the fused kernels compute new weights outside autograd: no gradient would reach them
        if backend == "fused":
            raise ValueError(f"{op}: the fused stage does not differentiate edge weights, and graph.edge_weight "
                             "requires grad; use backend='reference' or 'auto'")
        return None
    weight = graph.edge_weight  # without weights, the values come in the default dtype
    dtype = torch.get_default_dtype() if weight is None else weight.dtype
    if dtype not in (torch.float32, torch.float64):
        if backend == "fused":
            what = "edge weights" if weight is not None else "values (the default dtype, the graph being unweighted)"
            raise TypeError(f"{op}: the fused stage takes float32/float64 {what}; got {dtype} "
                            "(use backend='reference' or 'auto')")
        return None
    stage = _STAGES.get(graph.device.type)
    if stage is not None and stage.is_available():
        return stage
    if backend == "fused":
        raise ValueError(f"{op}: no fused graph-processing stage runs on {graph.device.type} graphs here "
                         "(the CUDA stage needs CuPy and a GPU); use backend='reference' or 'auto'")
    return None


def _learned(graph: Graph) -> bool:
    """Whether ``graph``'s edge weights need a gradient (learnable weights): then processing runs the
    differentiable reference and its result is not cached (the weights change every step)."""
    return graph.edge_weight is not None and graph.edge_weight.requires_grad


def _cached(op: str, graph: Graph, backend: str | None, key: tuple, build: Callable[[], Graph]) -> Graph:
    """``graph.cached(key, build)``, or a fresh ``build()`` when the edge weights are learned (a cached result
    would keep stale weights and a freed autograd graph). ``graph`` and ``backend`` are checked first: a cache hit
    would skip the checks of ``build`` (an explicit ``"fused"`` that cannot run here is refused also when an
    earlier call cached the reference's result).

    The result is rebuilt when ``graph.edge_weight`` was replaced, set, removed or changed in place since it was
    built (``Graph.cached(weighted=True)``), as the engine's permuted weights are."""
    _check_graph(op, graph)
    _fused(op, graph, backend)
    return build() if _learned(graph) else graph.cached(key, build, weighted=True)


def _check_graph(op: str, graph: object) -> None:
    if not isinstance(graph, Graph):
        raise TypeError(f"{op}: graph must be a graphfuse.Graph; got {type(graph).__name__}")


def _reference(graph: Graph, self_loops: bool, fill_value: float, norm: str) -> Graph:
    if self_loops:
        graph = reference.add_remaining_self_loops(graph, fill_value)
    if norm == "gcn":
        graph = reference.gcn_norm(graph, add_self_loops=False)
    elif norm == "mean":
        graph = reference.mean_norm(graph)
    return graph


def process_graph(
    graph: Graph,
    *,
    self_loops: bool = False,
    fill_value: float = 1.0,
    norm: str = "none",
    backend: str | None = None,
) -> Graph:
    """Self-loops and normalisation of ``graph``, returned with CSR, CSC and the CSR→CSC permutation built.

    Args:
        graph: the input graph (unsorted COO, duplicates allowed; weighted or not).
        self_loops: PyG's ``add_remaining_self_loops`` (existing loops replaced by one per node; a node that
            had one keeps its weight, others get ``fill_value``). Square graphs only.
        fill_value: weight of the inserted loops.
        norm: ``"none"``, ``"gcn"`` (``deg^-1/2[src] · w · deg^-1/2[dst]`` over in-degrees) or ``"mean"``
            (``w / deg[dst]``).
        backend: ``"auto"``/None (the fused stage when one runs on the graph's device, else the reference),
            ``"reference"`` or ``"fused"`` (raises when unavailable).

    Returns:
        A new :class:`Graph` (``graph`` itself when neither loops nor a normalisation are asked for) whose
        ``csr``, ``csc`` and ``csr_to_csc`` are built.
    """
    _check_graph("process_graph", graph)
    check_bools("process_graph", self_loops=self_loops)
    check_finite_real("process_graph", "fill_value", fill_value)
    if norm not in NORMS:
        raise ValueError(f"process_graph: norm must be one of {list(NORMS)}; got {norm!r}")
    if self_loops and graph.is_bipartite:
        raise ValueError(f"process_graph: self-loops need a square graph; got {graph}")
    if norm == "gcn" and graph.is_bipartite:
        raise ValueError(f"process_graph: norm='gcn' needs a square graph; got {graph}")
    stage = _fused("process_graph", graph, backend)
    if stage is not None:
        return stage.run(graph, self_loops, float(fill_value), norm)
    out = _reference(graph, self_loops, fill_value, norm)
    out.csr, out.csc, out.csr_to_csc  # noqa: B018 - build the cached formats
    return out


def build_formats(graph: Graph, *, backend: str | None = None) -> Graph:
    """Build (and cache on ``graph``) its CSR, CSC and CSR→CSC permutation, once; returns ``graph``."""
    return _formats("build_formats", graph, backend)


def _formats(op: str, graph: Graph, backend: str | None) -> Graph:
    """:func:`build_formats`, its errors naming ``op``."""
    _check_graph(op, graph)
    _fused(op, graph, backend)  # before the cache: a hit would skip process_graph's own check
    graph.cached(("processing", "formats"), lambda: process_graph(graph, backend=backend) is graph)  # a marker
    return graph


def gcn_norm(graph: Graph, *, add_self_loops: bool = True, improved: bool = False,
             backend: str | None = None) -> Graph:
    """Kipf & Welling's D^-1/2 (A + I) D^-1/2 with PyG semantics (see :func:`graphfuse.graph.norm.gcn_norm`),
    except that ``improved`` fills 2 on unweighted graphs too (PyG 2.8 keeps ``A + I`` there; see
    :class:`graphfuse.nn.GCNConv`).

    The fused stage on CUDA, the reference elsewhere; not cached (see :func:`process_gcn`).
    """
    _check_graph("gcn_norm", graph)
    check_bools("gcn_norm", add_self_loops=add_self_loops, improved=improved)
    if graph.is_bipartite:
        raise ValueError(f"gcn_norm: graph must be square (num_src == num_dst); got {graph}")
    stage = _fused("gcn_norm", graph, backend)
    if stage is None:
        return reference.gcn_norm(graph, add_self_loops=add_self_loops, improved=improved)
    return stage.run(graph, add_self_loops, 2.0 if improved else 1.0, "gcn")


def add_remaining_self_loops(graph: Graph, fill_value: float = 1.0, *, backend: str | None = None) -> Graph:
    """PyG's ``add_remaining_self_loops`` (see :func:`graphfuse.graph.norm.add_remaining_self_loops`)."""
    _check_graph("add_remaining_self_loops", graph)
    check_finite_real("add_remaining_self_loops", "fill_value", fill_value)
    stage = _fused("add_remaining_self_loops", graph, backend)
    if stage is None or graph.is_bipartite:
        return reference.add_remaining_self_loops(graph, fill_value)
    return stage.run(graph, True, float(fill_value), "none")


def mean_norm(graph: Graph, *, backend: str | None = None) -> Graph:
    """Right normalisation ``w / Σ w`` over each target's in-edges (see :func:`graphfuse.graph.norm.mean_norm`)."""
    _check_graph("mean_norm", graph)
    stage = _fused("mean_norm", graph, backend)
    if stage is None:
        return reference.mean_norm(graph)
    return stage.run(graph, False, 1.0, "mean")


def process_gcn(graph: Graph, *, add_self_loops: bool = True, improved: bool = False,
                backend: str | None = None) -> Graph:
    """:func:`gcn_norm`, cached on ``graph`` under ``("gcn_norm", add_self_loops, improved)`` (GCNConv's key;
    not cached for learned edge weights)."""
    check_bools("process_gcn", add_self_loops=add_self_loops, improved=improved)
    return _cached("process_gcn", graph, backend, ("gcn_norm", add_self_loops, improved),
                   lambda: gcn_norm(graph, add_self_loops=add_self_loops, improved=improved, backend=backend))


def process_gat(graph: Graph, *, add_self_loops: bool = True, backend: str | None = None) -> Graph:
    """GAT's processed graph: one self-loop per node (cached under ``("add_remaining_self_loops", 1.0)``,
    GATConv's key) with its formats built; ``graph`` itself (formats built) without self-loops."""
    check_bools("process_gat", add_self_loops=add_self_loops)
    if not add_self_loops:
        return _formats("process_gat", graph, backend)
    return _cached("process_gat", graph, backend, ("add_remaining_self_loops", 1.0),
                   lambda: add_remaining_self_loops(graph, 1.0, backend=backend))


def process_mean(graph: Graph, *, backend: str | None = None) -> Graph:
    """:func:`mean_norm`, cached on ``graph`` under ``("mean_norm",)`` (not for learned edge weights)."""
    return _cached("process_mean", graph, backend, ("mean_norm",), lambda: mean_norm(graph, backend=backend))
