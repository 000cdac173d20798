"""Public engine ops: validate, pick a backend through the dispatcher, run.

These are the only functions the layers call. Each accepts ``backend=`` (a registered name, ``"auto"``, or
None for the default) and ``deterministic=`` (None follows ``torch.are_deterministic_algorithms_enabled()``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from graphfuse.engine import dispatcher, edge_sampling
from graphfuse.engine.edge_sampling import EdgeSampling
from graphfuse.graph import Graph

REDUCES = ("sum", "mean", "max", "min")


def _check_graph(op: str, graph: Any) -> None:
    if not isinstance(graph, Graph):
        raise TypeError(f"{op}: graph must be a graphfuse.Graph; got {type(graph).__name__}")


def _check_nodes(op: str, name: str, t: Any, rows: int, rows_name: str, graph: Graph) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor; got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{op}: {name} must be floating point; got {t.dtype}")
    shape = t.shape  # one attribute read instead of dim() and size(0): ~0.1 µs less per call
    if len(shape) not in (2, 3) or shape[0] != rows:
        raise ValueError(f"{op}: {name} must have shape ({rows_name}={rows}, F) or ({rows_name}={rows}, H, C); "
                         f"got {tuple(shape)}")
    if t.device != graph.device:
        raise ValueError(f"{op}: {name} is on {t.device} but the graph is on {graph.device}")


def _check_edges(op: str, name: str, t: Any, graph: Graph, heads: int | None) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor; got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{op}: {name} must be floating point; got {t.dtype}")
    allowed = [(graph.num_edges,)] + ([(graph.num_edges, heads)] if heads else [])  # no (E, 0): H >= 1
    if t.shape not in allowed:  # a torch.Size equals the tuple of its sizes
        expected = " or ".join(str(s) for s in allowed)
        raise ValueError(f"{op}: {name} must have shape {expected} (E={graph.num_edges}); got {tuple(t.shape)}")
    if t.device != graph.device:
        raise ValueError(f"{op}: {name} is on {t.device} but the graph is on {graph.device}")


def aggregate(
    graph: Graph,
    x: Tensor,
    edge_weight: Tensor | None = None,
    reduce: str = "sum",
    *,
    backend: str | None = None,
    deterministic: bool | None = None,
    sampling: EdgeSampling | None = None,
) -> Tensor:
    """Aggregate source features into targets: ``out[i] = reduce_{e=(j→i)} w_e · x[j]``.

    Args:
        graph: the graph (or bipartite block); messages flow from ``edge_index[0]`` to ``edge_index[1]``.
        x: source features.
        edge_weight: per-edge weights in COO order; one per head for 3-D ``x`` (the GAT case). Overrides
            ``graph.edge_weight``; None uses ``graph.edge_weight`` (unweighted when that is None too). Cast to
            ``x``'s dtype (float16 ``x``: weights beyond float16's range become inf or 0).
        reduce: ``"sum"``, ``"mean"`` (weighted sum divided by in-degree), ``"max"`` or ``"min"``.
        backend: a registered backend name, ``"auto"``, or None for the default.
        deterministic: require an atomic-free backend.
        sampling: edge-sampled inference (:class:`~graphfuse.engine.edge_sampling.EdgeSampling`, ES-SpMM):
            at most ``sampling.width`` in-edges per target, scaled; refused when a gradient is needed. None
            takes the one :func:`~graphfuse.engine.edge_sampling.use_sampling` set, if any.

    Returns:
        Aggregated features. Targets with no in-edges get 0 for every reduce.

    Shapes:
        x: (num_src, F) or (num_src, H, C); edge_weight: (E,) or (E, H); out: (num_dst, F) or (num_dst, H, C).
    """
    if edge_weight is None and sampling is None and graph.__class__ is Graph and x.__class__ is Tensor:
        impl, w = _memoised(graph, x, reduce, backend, deterministic)
        if impl is not None:
            return impl(graph, x, w, reduce)
    _check_graph("aggregate", graph)
    _check_nodes("aggregate", "x", x, graph.num_src, "num_src", graph)
    if reduce not in REDUCES:
        raise ValueError(f"aggregate: reduce must be one of {list(REDUCES)}; got {reduce!r}")
    if edge_weight is None:
        edge_weight = graph.edge_weight  # checked by Graph
    else:
        _check_edges("aggregate", "edge_weight", edge_weight, graph, x.size(1) if x.dim() == 3 else None)
    if edge_weight is not None and edge_weight.dtype != x.dtype:
        edge_weight = edge_weight.to(x.dtype)
    if sampling is None:
        sampling = edge_sampling.current_sampling()
        if sampling is not None and torch.is_grad_enabled():  # the model-level switch: the layers' weights after
            raise ValueError(  # this call would train on sampled messages even when x itself needs no gradient
                "aggregate: use_sampling(...) is for inference; run the model under torch.no_grad() or "
                "torch.inference_mode() inside it, or leave the block before training")
    if sampling is not None:
        return _sampled(graph, x, edge_weight, reduce, backend, deterministic, sampling)
    impl = _resolve("aggregate", graph, x, edge_weight, reduce, backend, deterministic)
    return impl(graph, x, edge_weight, reduce)


def _memoised(graph: Graph, x: Tensor, reduce: str, backend: str | None,
              deterministic: bool | None) -> tuple[Any, Tensor | None]:
    """The implementation the graph's memo holds for ``aggregate(graph, x, reduce=reduce, backend=backend,
    deterministic=deterministic)`` (the layers' call: the graph's own weights, no sampling), and those weights;
    (None, None) when the memo has none yet or the call needs what only the full path does (weights to cast, a
    sampling block). A memo entry is made after the full path's checks of what its key fixes (x's dtype and shape,
    the reduce, the weights' kind, the backend and the flags: see :func:`_resolve`); x's device and the edges are
    checked here. On a small graph this is the host time the checks and the dispatch cost per call."""
    w = graph.edge_weight
    if ((w is not None and w.dtype is not x.dtype) or reduce.__class__ is not str or x.device != graph.device
            or edge_sampling.current_sampling() is not None):
        return None, None
    memo = graph.memo("dispatch")
    if memo is None:
        return None, None
    # _signature's value for these weights, inline: the graph's own are (E,)
    signature = (x.dtype, x.shape, reduce) if w is None else (x.dtype, x.shape, reduce, True, 1, w.requires_grad)
    return memo.get(dispatcher.memo_key("aggregate", backend, deterministic, signature)), w


def _signature(graph: Graph, x: Tensor, edge_weight: Tensor | None, reduce: str) -> tuple:
    """What of an aggregation call its memoised implementation depends on besides the graph (see
    dispatcher.resolve_cached): x's dtype and shape, the reduce, which edge weights (none, the graph's own, or
    others) with their rank and whether they need a gradient."""
    return ((x.dtype, x.shape, reduce) if edge_weight is None else
            (x.dtype, x.shape, reduce, edge_weight is graph.edge_weight, edge_weight.dim(), edge_weight.requires_grad))


def _resolve(op: str, graph: Graph, x: Tensor, edge_weight: Tensor | None, reduce: str, backend: str | None,
             deterministic: bool | None) -> Any:
    """The implementation of an aggregation op for this call, memoised on the graph (dispatcher.memo_key with
    :func:`_signature`). x is on the graph's device (checked)."""
    key = dispatcher.memo_key(op, backend, deterministic, _signature(graph, x, edge_weight, reduce))
    return dispatcher.resolve_cached(graph.cached("dispatch", dict), key, op, graph.device, backend, deterministic,
                                     graph=graph, x=x, edge_weight=edge_weight, reduce=reduce)


def _sampled(graph: Graph, x: Tensor, edge_weight: Tensor | None, reduce: str, backend: str | None,
             deterministic: bool | None, sampling: Any) -> Tensor:
    if not isinstance(sampling, EdgeSampling):
        raise TypeError(f"aggregate: sampling must be a graphfuse.EdgeSampling or None; got {type(sampling).__name__}")
    if torch.is_grad_enabled() and (x.requires_grad or (edge_weight is not None and edge_weight.requires_grad)):
        raise ValueError("aggregate: sampling= is for inference (its edges are fixed per seed, its gradient would be "
                         "biased); run it under torch.no_grad() or torch.inference_mode(), or drop sampling=")
    impl = _resolve("sampled_aggregate", graph, x, edge_weight, reduce, backend, deterministic)
    return impl(graph, x, edge_weight, reduce, sampling)


def sddmm(
    graph: Graph,
    a: Tensor,
    b: Tensor,
    edge_weight: Tensor | None = None,
    *,
    backend: str | None = None,
    deterministic: bool | None = None,
) -> Tensor:
    """Per-edge dot products ``out[e] = w_e · <a[dst_e], b[src_e]>`` (sampled dense-dense product).

    ``a`` and ``b`` share a dtype, the result's; ``edge_weight`` is cast to it.

    Shapes:
        a: (num_dst, F) or (num_dst, H, C); b: (num_src, F) or (num_src, H, C); edge_weight: (E,);
        out: (E,) or (E, H).
    """
    _check_graph("sddmm", graph)
    _check_nodes("sddmm", "a", a, graph.num_dst, "num_dst", graph)
    _check_nodes("sddmm", "b", b, graph.num_src, "num_src", graph)
    if a.shape[1:] != b.shape[1:]:
        raise ValueError(f"sddmm: a and b must share their trailing shape; got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype:  # the kernel and the reference would otherwise disagree on the result's dtype
        raise TypeError(f"sddmm: a and b must share a dtype; got {a.dtype} and {b.dtype}")
    if edge_weight is not None:
        _check_edges("sddmm", "edge_weight", edge_weight, graph, None)
        edge_weight = edge_weight.to(a.dtype)  # as aggregate casts to x's
    impl = dispatcher.resolve("sddmm", a.device, backend, deterministic, graph=graph, a=a, b=b)
    return impl(graph, a, b, edge_weight)


def edge_softmax(
    graph: Graph, scores: Tensor, *, backend: str | None = None, deterministic: bool | None = None
) -> Tensor:
    """Softmax of per-edge scores over the in-edges of each target, max-subtracted, per head.

    Shapes:
        scores: (E,) or (E, H) → same shape; each target's in-edges sum to 1.
    """
    _check_graph("edge_softmax", graph)
    if not isinstance(scores, Tensor) or not scores.is_floating_point():
        raise TypeError(f"edge_softmax: scores must be a floating-point torch.Tensor; got "
                        f"{getattr(scores, 'dtype', type(scores).__name__)}")
    if scores.dim() not in (1, 2) or scores.size(0) != graph.num_edges:
        raise ValueError(f"edge_softmax: scores must have shape (E={graph.num_edges},) or (E, H); "
                         f"got {tuple(scores.shape)}")
    if scores.device != graph.device:
        raise ValueError(f"edge_softmax: scores is on {scores.device} but the graph is on {graph.device}")
    impl = dispatcher.resolve("edge_softmax", scores.device, backend, deterministic, graph=graph, scores=scores)
    return impl(graph, scores)
