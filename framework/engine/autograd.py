"""Autograd Functions over the CUDA kernels, and the ``gespmm`` / ``gas`` / ``gar`` engine backends.

Layering: kernels/ launchers → the ``torch.autograd.Function``s here → the public ops of
:mod:`graphfuse.engine.functional` (through the dispatcher) → layers. Gradients:

- features: aggregation over the cached transpose (CSC, with the weights permuted to CSC order once per
  weight tensor and cached);
- edge weights: an SDDMM-style per-edge dot product ``<grad_out[dst], x[src]>`` written in COO order;
- mean: the output gradient pre-scaled by 1 / in-degree, then as sum;
- max/min: through the argmax/argmin saved by the forward pass (an entry gets the gradient of column k only
  where it was the chosen one; ties go to the first entry in CSR order).

Backends (all CUDA-only, float32/float64; ``gespmm`` also float16/bfloat16):

- ``gespmm``: GE-SpMM forward, GE-SpMM on CSC for the feature gradient, HP-SDDMM for the edge-weight
  gradient (GAR's masked SDDMM pass for max/min). Deterministic. Half-precision features are summed in float32
  by the kernel (the output rounded once); their edge-weight gradient runs the float32 SDDMM on widened copies.
- ``gar``: fuseGNN's fused GAR: block per target row forward, one fused pass per source row for the feature
  and edge-weight gradients. Deterministic.
- ``gas``: fuseGNN's fused GAS: edge-parallel atomics over the unsorted COO list (needs no CSR/CSC), sum and
  mean; max/min go through the GE-SpMM kernels (an atomic max cannot carry the argmax). Nondeterministic for
  sum/mean.
- ``hpspmm``: HP-SpMM over the hybrid CSR/COO form (nonzeros split evenly across warps; atomics only on
  rows cut between warps) forward and, over CSC, for the feature gradient; HP-SDDMM for the edge-weight
  gradient. Sum/mean with one weight per edge; max/min and per-head weights go through GE-SpMM.
  Nondeterministic for what it runs itself.

A backend's determinism is per call (``Backend.deterministic_call``): what ``gas`` and ``hpspmm`` hand to GE-SpMM,
and every backend's ``sddmm``, ``edge_softmax`` and ``sampled_aggregate``, run deterministically, so
``deterministic=True`` refuses only their own atomic aggregations.

``"auto"`` on CUDA (see :func:`choose`): ``gespmm`` for float16/bfloat16 features; ``gar`` when the edge weights
need a gradient (the GAT case) and the graph is dense (average in-degree >= 32, where its fused backward pays);
``gas`` for sum/mean on very sparse graphs (average in-degree < 2) when no deterministic result is asked for;
``gespmm`` otherwise.
Every backend's ``sddmm`` op is HP-SDDMM (kernels/sddmm.cu).

GE-SpMM calls go through :class:`~graphfuse.kernels.spmm.GespmmPlan`s cached on the graph (:func:`gespmm_plan`),
and a call whose operands need no gradient skips autograd's bookkeeping (:func:`run`): on small graphs the
host-side cost per call, not the kernel, is what a layer pays.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from graphfuse.engine.dispatcher import Backend, register_backend
from graphfuse.engine.reference import saveable_weights, widened
from graphfuse.graph import Graph
from graphfuse.kernels import es_spmm as es_kernels
from graphfuse.kernels import gar as gar_kernels
from graphfuse.kernels import gas as gas_kernels
from graphfuse.kernels import hp_spmm as hp_spmm_kernels
from graphfuse.kernels import runtime
from graphfuse.kernels import sddmm as sddmm_kernels
from graphfuse.kernels import spmm as spmm_kernels

SUPPORTED_DTYPES = (torch.float32, torch.float64)
GESPMM_DTYPES = SUPPORTED_DTYPES + runtime.HALF_DTYPES  # GE-SpMM's aggregation also takes half precision
GAR_MIN_DEGREE = 32.0
GAS_MAX_DEGREE = 2.0
SMALL_GRAPH_EDGES = 1 << 22
MID_GRAPH_EDGES, WIDE_K = 1 << 18, 128  # from here on, wide features take MID_SEGMENT
SPLIT_MIN_DEGREE = 64
SMALL_SEGMENT, MID_SEGMENT, LARGE_SEGMENT = 32, 64, 256  # row-split segment lengths (see segment_length)


# ------------------------------------------------------------------------------------------ graph caches
def _index32(graph: Graph, fmt: str) -> Tensor:
    """int32 copy of the CSR ``col`` (fmt="csr") or CSC ``row`` (fmt="csc"), cached on the graph."""

    def build() -> Tensor:
        bound = graph.num_src if fmt == "csr" else graph.num_dst
        if bound >= 2**31:
            raise ValueError(f"aggregate: the CUDA kernels index nodes with int32; got {bound} nodes")
        return (graph.csr.col if fmt == "csr" else graph.csc.row).to(torch.int32)

    return graph.cached(("kernels", "index32", fmt), build)


def segment_length(num_edges: int, k: int) -> int:
    """Entries per segment of a split row (GE-SpMM): short segments (``SMALL_SEGMENT``) on small graphs, where the
    longest warp is the critical path of a ~20 us kernel; ``LARGE_SEGMENT`` on large ones, where it only needs
    to tame hubs. H100, CUDA-graph replay (GPU time): Cora and PubMed (max in-degree ~170) took 17-21 us split
    past 64 into 32-entry segments against 23-57 us unsplit at K = 64-256; Facebook and the RMAT subgraphs were
    2-10x slower unsplit. In between (``MID_GRAPH_EDGES`` edges up), features of ``WIDE_K`` columns or more
    take ``MID_SEGMENT``: half the partials to fold. H200, same-run eager / replay us, 32 against 64: RMAT s15
    (691K entries) K = 128 82.7 / 59.1 against 80.5 / 55.2, K = 256 134.1 / 106.7 against 125.3 / 97.3; Facebook
    (342K) K = 256 88.3 / 63.6 against 81.4 / 61.1; at K = 64 32 stays ahead (s15 41.7 / 42.7 replay, Facebook
    28.6 / 32.2), and so on the graphs below 2^18 entries at every K (PubMed; RMAT s13, 161K: replay 21.9
    against 24.6 at K = 128); the uniform 65K graph (1.3M) ties."""
    if num_edges >= SMALL_GRAPH_EDGES:
        return LARGE_SEGMENT
    return MID_SEGMENT if num_edges >= MID_GRAPH_EDGES and k >= WIDE_K else SMALL_SEGMENT


def _schedule(graph: Graph, fmt: str, k: int) -> spmm_kernels.RowSchedule | None:
    """Row splitting for GE-SpMM of ``k`` feature columns, only for graphs with a row longer than
    ``SPLIT_MIN_DEGREE`` entries, into segments of :func:`segment_length` entries; cached per segment length."""
    segment = segment_length(graph.num_edges, k)

    def build() -> spmm_kernels.RowSchedule | None:
        ptr = graph.csr.rowptr if fmt == "csr" else graph.csc.colptr
        return spmm_kernels.row_schedule(ptr, segment, split_above=SPLIT_MIN_DEGREE)

    return graph.cached(("kernels", "schedule", fmt, segment), build)


def _plans(graph: Graph) -> dict:
    """The graph's kernel plans (GE-SpMM, HP-SpMM, ES-SpMM) by configuration key. The callers look a plan up
    and build it inline, without a closure: this lookup is on every aggregation's path."""
    return graph.cached(("kernels", "plans"), dict)


def gespmm_plan(graph: Graph, fmt: str, x: Tensor, *, reduce: str = "sum", heads: int = 1, weighted: bool = False,
                track: bool = False, argmask: bool = False) -> spmm_kernels.GespmmPlan:
    """The GE-SpMM plan over the graph's CSR (fmt="csr") or CSC (fmt="csc") for operands like ``x``, cached
    on the graph per configuration (built once; each call then only allocates and launches)."""
    plans = _plans(graph)
    # x.shape[1], not x.size(1): an attribute read, ~0.08 µs less on every aggregation
    key = ("gespmm", fmt, x.shape[1], x.dtype, reduce, heads, weighted, track, argmask)
    plan = plans.get(key)
    if plan is None:
        ptr = graph.csr.rowptr if fmt == "csr" else graph.csc.colptr
        plan = plans[key] = spmm_kernels.GespmmPlan(
            ptr, _index32(graph, fmt), k=x.size(1), dtype=x.dtype, reduce=reduce, heads=heads,
            wmode=0 if not weighted else (1 if heads == 1 else 2), schedule=_schedule(graph, fmt, x.size(1)), track=track,
            argmask=argmask)
    return plan


def hp_plan(graph: Graph, fmt: str, x: Tensor, *, reduce: str = "sum", weighted: bool = False
            ) -> hp_spmm_kernels.HpSpmmPlan:
    """The HP-SpMM plan over the graph's hybrid CSR (fmt="csr": per-entry target) or CSC (fmt="csc":
    per-entry source) form for operands like ``x``, cached on the graph per configuration."""
    plans = _plans(graph)
    key = ("hpspmm", fmt, x.size(1), x.dtype, reduce, weighted)
    plan = plans.get(key)
    if plan is None:
        ptr, row = (graph.csr.rowptr, graph.csr.row) if fmt == "csr" else (graph.csc.colptr, graph.csc.col)
        plan = plans[key] = hp_spmm_kernels.HpSpmmPlan(ptr, row, _index32(graph, fmt), k=x.size(1), dtype=x.dtype,
                                                       reduce=reduce, weighted=weighted)
    return plan


def _edge_dots(graph: Graph, a: Tensor, b: Tensor, heads: int) -> Tensor:
    """``<a[dst_e], b[src_e]>`` per head in COO order: HP-SDDMM over the graph's hybrid CSR/COO form."""
    csr = graph.csr
    return sddmm_kernels.hp_sddmm(csr.row, _index32(graph, "csr"), csr.perm, a, b, heads=heads, validate=False)


def _perm(graph: Graph, fmt: str) -> Tensor:
    return graph.csr.perm if fmt == "csr" else graph.csc.perm


def _permuted(graph: Graph, w: Tensor | None, fmt: str) -> Tensor | None:
    """Edge weights (COO order) in CSR or CSC order.

    The graph's own ``edge_weight`` is permuted once and cached on the graph under ``("kernels", "permuted",
    fmt)``, rebuilt when the weights are replaced or changed in place (``Graph.cached(weighted=True)``; the fused
    graph-processing stage pre-fills it); any other weight tensor (attention, gradcheck perturbations through
    ``.data``, which no version counter sees) and an inference tensor (which has none) is permuted per call, an
    E-element gather.
    """
    if w is None:
        return None
    if not _own_weights(graph, w):
        return w.detach().index_select(0, _perm(graph, fmt)).contiguous()
    return graph.cached(("kernels", "permuted", fmt), lambda: w.detach().index_select(0, _perm(graph, fmt)).contiguous(),
                        weighted=True)


def _own_weights(graph: Graph, w: Tensor) -> bool:
    """Whether ``w`` is the graph's own ``edge_weight`` with a version counter (not an inference tensor): the
    weights whose permuted copies are cached (:func:`_permuted`) and remembered (``BoundAggregate._csr_weights``)."""
    return w is graph.edge_weight and not w.is_inference()


def _gas_degree(graph: Graph) -> Tensor:
    """In-degree by bincount (GAS never builds CSR)."""
    return graph.cached(("kernels", "gas_degree"),
                        lambda: torch.bincount(graph.edge_index[1], minlength=graph.num_dst))


# ------------------------------------------------------------------------------------------ shapes
def _heads(w: Tensor | None) -> int:
    """The number of weight heads: 1 unless w is (E, H)."""
    return w.size(1) if (w is not None and w.dim() == 2) else 1


def _one_head(w: Tensor | None) -> Tensor | None:
    """(E, 1) weights (one head of a multi-head layer) as the (E,) view the kernels take for one head; the
    gradient flows back through the view in the caller's shape."""
    return w.view(-1) if w is not None and w.dim() == 2 and w.size(1) == 1 else w


def _flatten(graph: Graph, x: Tensor, w: Tensor | None) -> tuple[Tensor, int]:
    """x as (N, K) contiguous and the number of weight heads (:func:`_heads`)."""
    heads = _heads(w)
    if x.dim() == 2 and x.is_contiguous():
        return x, heads
    return x.flatten(1).contiguous(), heads


def _check_dtype(op: str, t: Tensor, what: str = "features") -> None:
    if t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{op}: the CUDA kernel backends support float32 and float64 {what}; got {t.dtype} "
                        "(use backend='reference')")


def _check_aggregate_dtype(name: str, x: Tensor) -> None:
    """Backend ``name``'s aggregation takes ``x``'s dtype: float32/float64, and float16/bfloat16 on ``gespmm``."""
    if x.dtype in SUPPORTED_DTYPES or (name == "gespmm" and x.dtype in GESPMM_DTYPES):
        return
    if x.dtype not in GESPMM_DTYPES:
        raise TypeError(f"aggregate: the CUDA kernel backends support float32 and float64 features, gespmm also "
                        f"float16 and bfloat16; got {x.dtype} (use backend='reference')")
    raise TypeError(f"aggregate: backend {name!r} supports float32 and float64 features; got {x.dtype} (use "
                    "backend='gespmm', which also takes float16 and bfloat16, or backend='reference')")


# ------------------------------------------------------------------------------------------ functions
class GespmmAggregate(torch.autograd.Function):
    """GE-SpMM aggregation; gradients through GE-SpMM on CSC and the SDDMM pass. Deterministic."""

    @staticmethod
    def forward(ctx: Any, graph: Graph, x: Tensor, w: Tensor | None, reduce: str, heads: int) -> Tensor:
        need_arg = reduce in ("max", "min") and any(ctx.needs_input_grad[1:3])
        plan = gespmm_plan(graph, "csr", x, reduce=reduce, heads=heads, weighted=w is not None, track=need_arg)
        out, arg = plan(x, _permuted(graph, w, "csr"))
        ctx.graph, ctx.reduce, ctx.heads = graph, reduce, heads
        ctx.save_for_backward(_for_dw(ctx, x, w), w, arg)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: Tensor) -> tuple:
        x, w, arg = ctx.saved_tensors
        graph, reduce, heads = ctx.graph, ctx.reduce, ctx.heads
        g = _scaled_grad(graph, grad_out, reduce)
        csc = graph.csc
        mask = {"edge_id": graph.csr_to_csc, "gather_arg": arg} if arg is not None else {}
        dx = dw = None
        if ctx.needs_input_grad[1]:
            plan = gespmm_plan(graph, "csc", g, heads=heads, weighted=w is not None, argmask=arg is not None)
            dx, _ = plan(g, _permuted(graph, w, "csc"), **mask)
        if w is not None and ctx.needs_input_grad[2] and arg is None:
            dw = _edge_dots(graph, widened(g), widened(x), heads).to(w.dtype)
        elif w is not None and ctx.needs_input_grad[2]:  # max/min: only the chosen entries get a gradient
            _, dw = gar_kernels.gar_backward(csc.colptr, _index32(graph, "csc"), widened(g), widened(x), None,
                                             heads=heads, edge_perm=csc.perm, need_dx=False, need_dw=True,
                                             validate=False, **mask)
            dw = dw.to(w.dtype)
        return None, dx, dw, None, None


class GarAggregate(torch.autograd.Function):
    """fuseGNN GAR aggregation: one fused CSC pass for both gradients. Deterministic."""

    @staticmethod
    def forward(ctx: Any, graph: Graph, x: Tensor, w: Tensor | None, reduce: str, heads: int) -> Tensor:
        csr = graph.csr
        need_arg = reduce in ("max", "min") and any(ctx.needs_input_grad[1:3])
        out, arg = gar_kernels.gar_forward(csr.rowptr, _index32(graph, "csr"), x, _permuted(graph, w, "csr"),
                                           reduce=reduce, heads=heads, return_arg=need_arg, validate=False)
        ctx.graph, ctx.reduce, ctx.heads = graph, reduce, heads
        ctx.save_for_backward(_for_dw(ctx, x, w), w, arg)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: Tensor) -> tuple:
        x, w, arg = ctx.saved_tensors
        graph, reduce, heads = ctx.graph, ctx.reduce, ctx.heads
        g = _scaled_grad(graph, grad_out, reduce)
        csc = graph.csc
        need_dx = ctx.needs_input_grad[1]
        need_dw = w is not None and ctx.needs_input_grad[2]
        if not (need_dx or need_dw):
            return None, None, None, None, None
        mask = {"edge_id": graph.csr_to_csc, "gather_arg": arg} if arg is not None else {}
        dx, dw = gar_kernels.gar_backward(csc.colptr, _index32(graph, "csc"), g, x if need_dw else None,
                                          _permuted(graph, w, "csc"), heads=heads, edge_perm=csc.perm,
                                          need_dx=need_dx, need_dw=need_dw, validate=False, **mask)
        return None, dx, dw, None, None


class GasAggregate(torch.autograd.Function):
    """fuseGNN GAS aggregation (sum/mean) over the COO edge list with atomics. Nondeterministic."""

    @staticmethod
    def forward(ctx: Any, graph: Graph, x: Tensor, w: Tensor | None, reduce: str, heads: int) -> Tensor:
        src, dst = graph.edge_index
        wc = None if w is None else w.detach().contiguous()
        out = gas_kernels.gas_forward(src, dst, x, wc, num_dst=graph.num_dst, heads=heads, validate=False)
        if reduce == "mean":
            out = out / _gas_degree(graph).clamp(min=1).to(out.dtype).unsqueeze(1)
        ctx.graph, ctx.reduce, ctx.heads = graph, reduce, heads
        ctx.save_for_backward(_for_dw(ctx, x, w), w)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: Tensor) -> tuple:
        x, w = ctx.saved_tensors
        graph, reduce, heads = ctx.graph, ctx.reduce, ctx.heads
        g = grad_out.contiguous()
        if reduce == "mean":
            g = g / _gas_degree(graph).clamp(min=1).to(g.dtype).unsqueeze(1)
        need_dx = ctx.needs_input_grad[1]
        need_dw = w is not None and ctx.needs_input_grad[2]
        if not (need_dx or need_dw):
            return None, None, None, None, None
        src, dst = graph.edge_index
        dx, dw = gas_kernels.gas_backward(src, dst, g, x if need_dw else None,
                                          None if w is None else w.detach().contiguous(), num_src=graph.num_src,
                                          heads=heads, need_dx=need_dx, need_dw=need_dw, validate=False)
        return None, dx, dw, None, None


class HpSpmmAggregate(torch.autograd.Function):
    """HP-SpMM aggregation (sum/mean, one weight per edge); the feature gradient by HP-SpMM over the CSC
    hybrid form, the edge-weight gradient by HP-SDDMM. Nondeterministic (atomics on rows cut between
    workers)."""

    @staticmethod
    def forward(ctx: Any, graph: Graph, x: Tensor, w: Tensor | None, reduce: str, heads: int) -> Tensor:
        out = hp_plan(graph, "csr", x, reduce=reduce, weighted=w is not None)(x, _permuted(graph, w, "csr"))
        ctx.graph, ctx.reduce = graph, reduce
        ctx.save_for_backward(_for_dw(ctx, x, w), w)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: Tensor) -> tuple:
        x, w = ctx.saved_tensors
        graph = ctx.graph
        g = _scaled_grad(graph, grad_out, ctx.reduce)
        dx = dw = None
        if ctx.needs_input_grad[1]:
            dx = hp_plan(graph, "csc", g, weighted=w is not None)(g, _permuted(graph, w, "csc"))
        if w is not None and ctx.needs_input_grad[2]:
            dw = _edge_dots(graph, g, x, 1)
        return None, dx, dw, None, None


def _for_dw(ctx: Any, x: Tensor, w: Tensor | None) -> Tensor | None:
    """What an aggregation saves of its features ``x``: they are needed only for the edge-weight gradient (the
    feature gradient aggregates the output gradient alone), so without it nothing, and ``x`` is freed with the
    rest of the forward (a GCN layer's (N, hidden) linear output, kept until the backward before)."""
    return x if w is not None and ctx.needs_input_grad[2] else None


def _scaled_grad(graph: Graph, grad_out: Tensor, reduce: str) -> Tensor:
    """The output gradient, divided by the in-degree for a mean: in float32 for float16/bfloat16 (a degree of
    65,520 or more is inf in float16, and the division then zeroed the hub's gradient), rounded back once."""
    g = grad_out.contiguous()
    if reduce == "mean":
        wide = widened(g)
        g = (wide / graph.in_degree.clamp(min=1).to(wide.dtype).unsqueeze(1)).to(g.dtype)
    return g


class Sddmm(torch.autograd.Function):
    """``out[e] = <a[dst_e], b[src_e]>`` per head (HP-SDDMM over the hybrid CSR/COO form)."""

    @staticmethod
    def forward(ctx: Any, graph: Graph, a: Tensor, b: Tensor, heads: int) -> Tensor:
        out = _edge_dots(graph, a, b, heads)
        ctx.graph, ctx.heads = graph, heads
        ctx.save_for_backward(a if ctx.needs_input_grad[2] else None, b if ctx.needs_input_grad[1] else None)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple:
        a, b = ctx.saved_tensors
        graph, heads = ctx.graph, ctx.heads
        grad = grad.contiguous()
        da = db = None
        if ctx.needs_input_grad[1]:  # da[dst] = sum_e grad_e * b[src_e]: aggregation over CSR
            plan = gespmm_plan(graph, "csr", b, heads=heads, weighted=True)
            da, _ = plan(b, grad.index_select(0, graph.csr.perm).contiguous())
        if ctx.needs_input_grad[2]:  # db[src] = sum_e grad_e * a[dst_e]: aggregation over CSC
            plan = gespmm_plan(graph, "csc", a, heads=heads, weighted=True)
            db, _ = plan(a, grad.index_select(0, graph.csc.perm).contiguous())
        return None, da, db, None


# ------------------------------------------------------------------------------------------ engine ops
_FUNCTIONS = {"gespmm": GespmmAggregate, "gar": GarAggregate, "gas": GasAggregate, "hpspmm": HpSpmmAggregate}


class _NoGradContext:
    """Stands in for autograd's ctx when no gradient is needed (skips Function.apply's bookkeeping)."""

    needs_input_grad = (False,) * 8

    def save_for_backward(self, *tensors: Any) -> None:
        pass


def run(fn: type[torch.autograd.Function], *args: Any) -> Any:
    """``fn.apply(*args)``, or straight ``fn.forward`` when no tensor argument needs a gradient: the same
    result without autograd's per-call bookkeeping (tens of microseconds on a small graph)."""
    if torch.is_grad_enabled():
        for a in args:
            if isinstance(a, Tensor) and a.requires_grad:
                return fn.apply(*map(_saveable, args))
    return fn.forward(_NoGradContext(), *args)


def _saveable(t: Any) -> Any:
    """``t``, or a copy of it when it is an inference tensor (made under ``torch.inference_mode``), which a
    Function's forward could not save for backward: features made there, weights that need a gradient."""
    return t.clone() if isinstance(t, Tensor) and t.is_inference() else t


class BoundAggregate:
    """``aggregate`` through one kernel backend, bound to one graph and one memo signature (``Backend.bind``,
    :func:`graphfuse.engine.dispatcher.resolve_cached`: the dtype and shape of ``x``, the reduce, which edge
    weights). The autograd Function, the weight heads and, for GE-SpMM and HP-SpMM, the plan of a call without
    gradient are looked up once, so such a call only checks the layout of ``x``, finds the permuted weights,
    allocates and launches: on a small graph, host time is what an aggregation costs. Holds no reference to
    the graph, whose memo holds it, nor to its weights (weak references only)."""

    __slots__ = ("fn", "heads", "plan", "pair", "out_shape", "one_head", "remembered")

    def __init__(self, name: str, graph: Graph, x: Tensor, edge_weight: Tensor | None, reduce: str) -> None:
        _check_aggregate_dtype(name, x)
        if edge_weight is not None and edge_weight.dtype != x.dtype:  # graphfuse.aggregate casts them; a direct
            # call of a backend function would have the kernel read them as x's dtype
            raise TypeError(f"aggregate: edge_weight must have x's dtype {x.dtype} on the kernel backends; got "
                            f"{edge_weight.dtype} (graphfuse.aggregate casts it)")
        self.heads = _heads(edge_weight)
        # (E, 1) weights go to the kernels as an (E,) view (see _one_head); the memo's signature fixes their shape
        self.one_head = edge_weight is not None and edge_weight.dim() == 2 and self.heads == 1
        fn = _function(name, reduce, self.heads)
        self.fn, self.plan, self.pair = fn, None, fn is GespmmAggregate
        self.out_shape = None if x.dim() == 2 else (graph.num_dst, *x.shape[1:])
        self.remembered: tuple | None = None  # see _csr_weights
        weighted = edge_weight is not None
        if x.dim() == 2 and fn is GespmmAggregate:
            self.plan = gespmm_plan(graph, "csr", x, reduce=reduce, heads=self.heads, weighted=weighted)
        elif x.dim() == 2 and fn is HpSpmmAggregate:
            self.plan = hp_plan(graph, "csr", x, reduce=reduce, weighted=weighted)

    def __call__(self, graph: Graph, x: Tensor, edge_weight: Tensor | None, reduce: str) -> Tensor:
        x2 = x if self.out_shape is None and x.is_contiguous() else x.flatten(1).contiguous()
        if self.one_head:
            edge_weight = edge_weight.view(-1)
        if torch.is_grad_enabled() and (x.requires_grad or (edge_weight is not None and edge_weight.requires_grad)):
            out = self.fn.apply(graph, _saveable(x2), _saveable(edge_weight), reduce, self.heads)
        elif self.plan is not None:  # the forward pass without autograd's ctx, as fn.forward would run it
            out = self.plan(x2, self._csr_weights(graph, edge_weight))
            if self.pair:
                out = out[0]
        else:
            out = self.fn.forward(_NoGradContext(), graph, x2, edge_weight, reduce, self.heads)
        return out if self.out_shape is None else out.view(self.out_shape)

    def _csr_weights(self, graph: Graph, w: Tensor | None) -> Tensor | None:
        """``w`` in CSR order (:func:`_permuted`). For the graph's own weights, the copy that the graph's weighted
        cache returned is remembered with the weights' version, both by weak reference: while the same weights,
        unchanged, come again and the graph's cache still holds that copy, it is handed out without the lookup
        (about 4 of a weighted small-graph call's 25 µs of host time on the CPU machine). Once the graph's cache
        lets the copy go (replaced or changed weights), so does this; an inference tensor (no version) is never
        remembered. The graph's edge_index is checked by the same call's dispatch lookup
        (:func:`graphfuse.engine.functional._resolve`)."""
        if w is None:
            return None
        remembered = self.remembered
        if remembered is not None and remembered[0]() is w and w._version == remembered[1]:
            permuted = remembered[2]()
            if permuted is not None:
                return permuted
        permuted = _permuted(graph, w, "csr")
        if _own_weights(graph, w):
            self.remembered = (weakref.ref(w), w._version, weakref.ref(permuted))
        return permuted


def _function(name: str, reduce: str, heads: int) -> type:
    """The autograd Function that runs backend ``name``'s aggregation: ``gas`` and ``hpspmm`` hand max/min (and
    ``hpspmm`` per-head weights) to GE-SpMM."""
    if (name == "gas" and reduce in ("max", "min")) or (name == "hpspmm" and (reduce in ("max", "min") or heads > 1)):
        return GespmmAggregate
    return _FUNCTIONS[name]


def _aggregate(name: str, graph: Graph, x: Tensor, edge_weight: Tensor | None, reduce: str) -> Tensor:
    return BoundAggregate(name, graph, x, edge_weight, reduce)(graph, x, edge_weight, reduce)


def gespmm_aggregate(graph: Graph, x: Tensor, edge_weight: Tensor | None = None, reduce: str = "sum") -> Tensor:
    """Engine ``aggregate`` through GE-SpMM (see :func:`graphfuse.aggregate`)."""
    return _aggregate("gespmm", graph, x, edge_weight, reduce)


def gar_aggregate(graph: Graph, x: Tensor, edge_weight: Tensor | None = None, reduce: str = "sum") -> Tensor:
    """Engine ``aggregate`` through fused GAR (see :func:`graphfuse.aggregate`)."""
    return _aggregate("gar", graph, x, edge_weight, reduce)


def gas_aggregate(graph: Graph, x: Tensor, edge_weight: Tensor | None = None, reduce: str = "sum") -> Tensor:
    """Engine ``aggregate`` through fused GAS (see :func:`graphfuse.aggregate`); sum/mean nondeterministic."""
    return _aggregate("gas", graph, x, edge_weight, reduce)


def hpspmm_aggregate(graph: Graph, x: Tensor, edge_weight: Tensor | None = None, reduce: str = "sum") -> Tensor:
    """Engine ``aggregate`` through HP-SpMM (see :func:`graphfuse.aggregate`); sum/mean nondeterministic."""
    return _aggregate("hpspmm", graph, x, edge_weight, reduce)


def sampled_aggregate(graph: Graph, x: Tensor, edge_weight: Tensor | None, reduce: str, sampling: Any) -> Tensor:
    """Engine ``sampled_aggregate`` (edge-sampled inference) through the ES-SpMM kernel: the kept entries of
    :func:`graphfuse.engine.edge_sampling.kept_entries`, chosen inside the kernel, with an
    :class:`~graphfuse.kernels.es_spmm.EsSpmmPlan` cached on the graph per configuration and sampling. One
    weight per edge."""
    _check_dtype("sampled_aggregate", x)
    edge_weight = _one_head(edge_weight)
    x2, heads = _flatten(graph, x, edge_weight)
    if heads > 1:
        raise ValueError("aggregate: the ES-SpMM kernel takes one weight per edge; got per-head weights of shape "
                         f"{tuple(edge_weight.shape)} (use backend='reference' for sampled per-head aggregation)")
    plans = _plans(graph)
    key = ("es", x2.size(1), x2.dtype, reduce, edge_weight is not None, sampling)
    plan = plans.get(key)
    if plan is None:
        plan = plans[key] = es_kernels.EsSpmmPlan(
            graph.csr.rowptr, _index32(graph, "csr"), k=x2.size(1), dtype=x2.dtype, reduce=reduce,
            weighted=edge_weight is not None, width=sampling.width, strategy=sampling.strategy, seed=sampling.seed)
    out = plan(x2, _permuted(graph, edge_weight, "csr"))
    return out if x.dim() == 2 else out.view(graph.num_dst, *x.shape[1:])


def sddmm(graph: Graph, a: Tensor, b: Tensor, edge_weight: Tensor | None = None) -> Tensor:
    """Engine ``sddmm`` through HP-SDDMM (see :func:`graphfuse.sddmm`). Deterministic."""
    _check_dtype("sddmm", a, "operands")
    heads = a.size(1) if a.dim() == 3 else 1
    a2 = a.flatten(1).contiguous()  # flatten, not reshape(N, -1): N = 0 rows are fine
    b2 = b.flatten(1).contiguous()
    out = run(Sddmm, graph, a2, b2, heads)
    if a.dim() == 3:  # (E, H) for per-head inputs, H = 1 included, as the reference gives
        out = out.view(-1, heads)
    if edge_weight is None:
        return out
    return out * saveable_weights(edge_weight).to(out.dtype).view(-1, *([1] * (out.dim() - 1)))


def edge_softmax(graph: Graph, scores: Tensor) -> Tensor:
    """Engine ``edge_softmax`` without atomics, forward or backward: per-target segment reductions over
    CSR-ordered scores (:class:`SegmentSoftmax`); the two reorderings are permutations (each element moved
    once, also in their backward)."""
    _check_dtype("edge_softmax", scores, "scores")  # segment_reduce would sum half precision in half precision
    if graph.num_edges == 0:
        return scores.clone()
    csr = graph.csr
    out_csr = SegmentSoftmax.apply(scores.index_select(0, csr.perm), graph.in_degree, csr.row)
    inverse = graph.cached(("kernels", "inverse_csr"), lambda: torch.argsort(csr.perm))
    return out_csr.index_select(0, inverse)


class SegmentSoftmax(torch.autograd.Function):
    """Softmax of each segment of ``s`` (consecutive ``lengths`` entries; ``row`` is each entry's segment). The
    backward, ``y · (g − Σ_segment g·y)``, gathers and segment-sums: no ``index_select`` backward, whose
    index_add uses atomics on CUDA (nondeterministic with repeated indices)."""

    @staticmethod
    def forward(ctx: Any, s: Tensor, lengths: Tensor, row: Tensor) -> Tensor:
        row_max = torch.segment_reduce(s, "max", lengths=lengths, unsafe=True)
        e = (s - row_max.index_select(0, row)).exp()
        y = e / torch.segment_reduce(e, "sum", lengths=lengths, unsafe=True).index_select(0, row)
        ctx.save_for_backward(y, lengths, row)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple:
        y, lengths, row = ctx.saved_tensors
        dots = torch.segment_reduce(grad * y, "sum", lengths=lengths, unsafe=True)
        return y * (grad - dots.index_select(0, row)), None, None


# ------------------------------------------------------------------------------------------ choice
def choose(graph: Graph, x: Tensor, edge_weight: Tensor | None, reduce: str) -> str | None:
    """The kernel backend ``"auto"`` prefers for an aggregate call (None: no kernel takes it)."""
    if x.dtype not in SUPPORTED_DTYPES:
        return "gespmm" if x.dtype in GESPMM_DTYPES else None
    avg_degree = graph.num_edges / max(1, graph.num_dst)
    if edge_weight is not None and edge_weight.requires_grad and avg_degree >= GAR_MIN_DEGREE:
        return "gar"
    if reduce in ("sum", "mean") and avg_degree < GAS_MAX_DEGREE:
        return "gas"
    return "gespmm"


def _supports(name: str):
    def supports(op: str, **call: Any) -> bool:
        if op == "aggregate":
            choice = choose(call["graph"], call["x"], call.get("edge_weight"), call["reduce"])
            # gespmm is the fallback of the others (e.g. when determinism excludes gas).
            return choice == name or (name == "gespmm" and choice is not None)
        if op == "sampled_aggregate":  # one kernel serves every backend name; "auto" reaches it through gespmm
            w = call.get("edge_weight")
            return name == "gespmm" and call["x"].dtype in SUPPORTED_DTYPES and (w is None or w.dim() == 1)
        tensor = call.get("a", call.get("scores"))
        return name == "gespmm" and tensor is not None and tensor.dtype in SUPPORTED_DTYPES

    return supports


def _deterministic_call(name: str):
    def deterministic_call(op: str, **call: Any) -> bool:
        """gas and hpspmm run atomics only in their own sum/mean aggregations: their max/min (and hpspmm's per-head
        weights) run GE-SpMM, and every backend's sddmm, edge_softmax and sampled_aggregate are atomic-free."""
        if op != "aggregate":
            return True
        return _function(name, call.get("reduce"), _heads(call.get("edge_weight"))) in (GespmmAggregate, GarAggregate)

    return deterministic_call


def _binder(name: str):
    def bind(op: str, *, graph: Graph, x: Tensor, edge_weight: Tensor | None, reduce: str) -> BoundAggregate | None:
        return BoundAggregate(name, graph, x, edge_weight, reduce) if op == "aggregate" else None

    return bind


_BACKENDS = (  # name, aggregate, deterministic on, priority under "auto"
    ("gas", gas_aggregate, frozenset(), 30),
    ("gar", gar_aggregate, frozenset({"cuda"}), 20),
    ("gespmm", gespmm_aggregate, frozenset({"cuda"}), 10),
    ("hpspmm", hpspmm_aggregate, frozenset(), 5),
)
KERNEL_BACKENDS = tuple(name for name, *_ in _BACKENDS)
"""Names of the CUDA kernel backends (features of a dtype in ``SUPPORTED_DTYPES``; ``gespmm``'s aggregation also
float16/bfloat16, ``GESPMM_DTYPES``)."""


def register() -> None:
    """Register the four kernel backends with the dispatcher (done once at ``import graphfuse``)."""
    common = {"sddmm": sddmm, "edge_softmax": edge_softmax, "sampled_aggregate": sampled_aggregate}
    for name, fn, deterministic, priority in _BACKENDS:
        register_backend(Backend(
            name=name,
            ops={"aggregate": fn, **common},
            devices=frozenset({"cuda"}),
            deterministic_on=deterministic,
            deterministic_call=_deterministic_call(name),
            is_available=runtime.is_available,
            priority=priority,
            supports=_supports(name),
            bind=_binder(name),
        ))


register()
