"""GAT attention: the public ``gat_attention`` / ``gat_aggregate`` ops, their plain-PyTorch twins and the
fused CUDA autograd Functions (kernels/gat_attention.cu).

``alpha^h_e = dropout(softmax_{e ∈ in(t)}(LeakyReLU(a_src[s]^h + a_dst[t]^h)))`` for every edge e = (s → t),
where ``a_src = (x W) · att_src`` and ``a_dst = (x W) · att_dst`` are per-node (N, H) terms (the small GEMM
of fuseGNN's fused GAT processing: ``gat_scores``, one launch for both). ``gat_aggregate`` then sums
``alpha^h_e · h[s]^h`` into each target.

Fused path (CUDA, float32/float64, backend ``"auto"`` or ``"fused"``): one warp-per-target kernel computes
max, sum and the coefficients; the backward recomputes coefficients from the per-target (N, H) statistics.
``gat_aggregate`` keeps no per-edge tensor alive between forward and backward: its forward writes the
coefficients in CSR order only for the SpMM; its backward recomputes them in CSC order for the feature
gradient, then gets the coefficient gradient (E, H) from the SDDMM pass. Peak extra memory is one or two
(E, H) tensors, never (E, H, C). Atomic-free, run-to-run deterministic. Attention dropout draws its mask from
a counter-based hash of (seed, edge, head) — the seed comes from torch's CPU generator, so
``torch.manual_seed`` makes it reproducible; the mask differs from ``F.dropout``'s.

Reference path (any device, other backends): exactly the composition GATConv always used — LeakyReLU,
:func:`graphfuse.edge_softmax`, ``F.dropout``, :func:`graphfuse.aggregate`.

Shapes:
    alpha_src: (num_src, H); alpha_dst: (num_dst, H); h: (num_src, H, C); att_src, att_dst: (H, C);
    gat_scores → two (N, H); gat_attention → (E, H) in COO edge order; gat_aggregate → (num_dst, H, C).
"""

from __future__ import annotations

import numbers
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.autograd.function import once_differentiable

from graphfuse.checks import check_bools, check_finite_real
from graphfuse.engine import dispatcher
from graphfuse.engine.autograd import _index32, gespmm_plan, run
from graphfuse.engine.edge_sampling import use_sampling
from graphfuse.engine.functional import aggregate, edge_softmax
from graphfuse.graph import Graph
from graphfuse.kernels import gar as gar_kernels
from graphfuse.kernels import gat_attention as gat_kernels
from graphfuse.kernels import runtime

FUSED = "fused"
SUPPORTED_DTYPES = (torch.float32, torch.float64)


# ------------------------------------------------------------------------------------------ reference twins
def reference_gat_attention(graph: Graph, alpha_src: Tensor, alpha_dst: Tensor, negative_slope: float,
                            dropout: float, training: bool, backend: str | None = None) -> Tensor:
    """LeakyReLU → edge softmax → dropout, with the engine's public ops (GATConv's original path)."""
    src, dst = graph.edge_index
    # index_select: the backward of advanced indexing (index_put_ with accumulation) sums in a varying order on
    # CPU, index_select's (index_add_) in a fixed one
    scores = F.leaky_relu(alpha_src.index_select(0, src) + alpha_dst.index_select(0, dst), negative_slope)
    alpha = edge_softmax(graph, scores, backend=backend)
    return F.dropout(alpha, p=dropout, training=training)


def reference_gat_aggregate(graph: Graph, h: Tensor, alpha_src: Tensor, alpha_dst: Tensor, negative_slope: float,
                            dropout: float, training: bool, backend: str | None = None) -> Tensor:
    """:func:`reference_gat_attention`, then :func:`graphfuse.aggregate` of ``h`` with those weights (never
    edge-sampled, as the fused kernel is not: :func:`graphfuse.engine.edge_sampling.use_sampling` leaves GAT exact)."""
    alpha = reference_gat_attention(graph, alpha_src, alpha_dst, negative_slope, dropout, training, backend)
    return _weighted_sum(graph, h, alpha, backend)


def _weighted_sum(graph: Graph, h: Tensor, alpha: Tensor, backend: str | None) -> Tensor:
    """``aggregate`` of ``h`` with the per-head weights ``alpha`` through engine ``backend``, never edge-sampled."""
    with use_sampling(None):
        return aggregate(graph, h, edge_weight=alpha, reduce="sum", backend=backend)


def reference_gat_scores(h: Tensor, att_src: Tensor, att_dst: Tensor) -> tuple[Tensor, Tensor]:
    """The per-node attention terms ``(h · att_src).sum(-1)`` and ``(h · att_dst).sum(-1)``."""
    return (h * att_src).sum(-1), (h * att_dst).sum(-1)


# ------------------------------------------------------------------------------------------ fused functions
class FusedGatScores(torch.autograd.Function):
    """Both per-node attention terms in one launch; backward by broadcasting (dense, N-sized)."""

    @staticmethod
    def forward(ctx: Any, h: Tensor, att_src: Tensor, att_dst: Tensor) -> tuple[Tensor, Tensor]:
        ctx.save_for_backward(h, att_src, att_dst)
        return gat_kernels.node_scores(h, att_src, att_dst, check=False)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, d_src: Tensor | None, d_dst: Tensor | None) -> tuple:
        h, att_src, att_dst = ctx.saved_tensors
        d_src = torch.zeros(h.shape[:2], dtype=h.dtype, device=h.device) if d_src is None else d_src
        d_dst = torch.zeros(h.shape[:2], dtype=h.dtype, device=h.device) if d_dst is None else d_dst
        dh = datt_src = datt_dst = None
        if ctx.needs_input_grad[0]:
            dh = d_src.unsqueeze(-1) * att_src + d_dst.unsqueeze(-1) * att_dst
        if ctx.needs_input_grad[1]:
            datt_src = (d_src.unsqueeze(-1) * h).sum(0)
        if ctx.needs_input_grad[2]:
            datt_dst = (d_dst.unsqueeze(-1) * h).sum(0)
        return dh, datt_src, datt_dst


def _csr_args(graph: Graph) -> tuple[Tensor, Tensor, Tensor]:
    return graph.csr.rowptr, _index32(graph, "csr"), graph.csr.perm


def _backward(graph: Graph, dalpha: Tensor, rpos: Tensor | None, cpos: Tensor, saved: tuple, slope: float,
              dropout: float, seed: int, need_src: bool, need_dst: bool) -> tuple[Tensor | None, Tensor | None]:
    a_src, a_dst, row_max, row_sum = saved
    csc = graph.csc
    return gat_kernels.softmax_backward(
        *_csr_args(graph), csc.colptr, _index32(graph, "csc"), csc.perm, dalpha, rpos, cpos, a_src, a_dst,
        row_max, row_sum, negative_slope=slope, dropout=dropout, seed=seed, need_src=need_src, need_dst=need_dst,
        check=False)


class FusedGatAttention(torch.autograd.Function):
    """Coefficients (E, H) in COO order; backward into a_src / a_dst by two atomic-free passes."""

    @staticmethod
    def forward(ctx: Any, graph: Graph, a_src: Tensor, a_dst: Tensor, slope: float, dropout: float,
                seed: int) -> Tensor:
        alpha, _, row_max, row_sum = gat_kernels.softmax_forward(
            *_csr_args(graph), a_src, a_dst, negative_slope=slope, dropout=dropout, seed=seed, coo_order=True,
            check=False)
        ctx.graph, ctx.slope, ctx.dropout, ctx.seed = graph, slope, dropout, seed
        ctx.save_for_backward(a_src, a_dst, row_max, row_sum)
        return alpha

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, dalpha: Tensor) -> tuple:
        graph = ctx.graph
        need_src, need_dst = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        if not (need_src or need_dst):
            return None, None, None, None, None, None
        d_src, d_dst = _backward(graph, dalpha.contiguous(), graph.csr.perm, graph.csc.perm, ctx.saved_tensors,
                                 ctx.slope, ctx.dropout, ctx.seed, need_src, need_dst)
        return None, d_src, d_dst, None, None, None


class FusedGatAggregate(torch.autograd.Function):
    """Attention and aggregation without a per-edge tensor kept between forward and backward.

    Forward: coefficients in CSR order (transient) → GE-SpMM. Backward: coefficients recomputed in CSC order
    (transient) → GE-SpMM over CSC for dh; SDDMM ``<g[t], h[s]>`` per head written in CSR order → the two
    softmax-backward passes for d a_dst and d a_src.
    """

    @staticmethod
    def forward(ctx: Any, graph: Graph, h: Tensor, a_src: Tensor, a_dst: Tensor, slope: float, dropout: float,
                seed: int) -> Tensor:
        heads = a_src.size(1)
        _, alpha, row_max, row_sum = gat_kernels.softmax_forward(
            *_csr_args(graph), a_src, a_dst, negative_slope=slope, dropout=dropout, seed=seed, coo_order=False,
            csr_order=True, check=False)
        plan = gespmm_plan(graph, "csr", h, heads=heads, weighted=True)
        out, _ = plan(h, alpha.view(-1) if heads == 1 else alpha)
        del alpha
        ctx.graph, ctx.slope, ctx.dropout, ctx.seed, ctx.heads = graph, slope, dropout, seed, heads
        ctx.save_for_backward(h, a_src, a_dst, row_max, row_sum)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple:
        graph, heads = ctx.graph, ctx.heads
        h, a_src, a_dst, row_max, row_sum = ctx.saved_tensors
        g = grad.contiguous()
        csc = graph.csc
        row32 = _index32(graph, "csc")
        dh = d_src = d_dst = None
        if ctx.needs_input_grad[1]:
            alpha = gat_kernels.alpha_entries(csc.col, row32, csc.perm, a_src, a_dst, row_max, row_sum,
                                              negative_slope=ctx.slope, dropout=ctx.dropout, seed=ctx.seed,
                                              check=False)
            plan = gespmm_plan(graph, "csc", g, heads=heads, weighted=True)
            dh, _ = plan(g, alpha.view(-1) if heads == 1 else alpha)
            del alpha
        need_src, need_dst = ctx.needs_input_grad[2], ctx.needs_input_grad[3]
        if need_src or need_dst:
            _, dalpha = gar_kernels.gar_backward(csc.colptr, row32, g, h, None, heads=heads,
                                                 edge_perm=graph.csr_to_csc, need_dx=False, need_dw=True,
                                                 validate=False)
            d_src, d_dst = _backward(graph, dalpha.view(-1, heads), None, graph.csr_to_csc,
                                     (a_src, a_dst, row_max, row_sum), ctx.slope, ctx.dropout, ctx.seed,
                                     need_src, need_dst)
        return None, dh, d_src, d_dst, None, None, None


# ------------------------------------------------------------------------------------------ public ops
def _check(op: str, graph: Any, alpha_src: Any, alpha_dst: Any, negative_slope: float, dropout: float,
           training: bool) -> int:
    check_finite_real(op, "negative_slope", negative_slope)
    check_bools(op, training=training)
    if not isinstance(graph, Graph):
        raise TypeError(f"{op}: graph must be a graphfuse.Graph; got {type(graph).__name__}")
    for name, t, rows, rows_name in (("alpha_src", alpha_src, graph.num_src, "num_src"),
                                     ("alpha_dst", alpha_dst, graph.num_dst, "num_dst")):
        if not isinstance(t, Tensor) or not t.is_floating_point():
            raise TypeError(f"{op}: {name} must be a floating-point torch.Tensor; got "
                            f"{getattr(t, 'dtype', type(t).__name__)}")
        if t.dim() != 2 or t.size(0) != rows or t.size(1) == 0:
            raise ValueError(f"{op}: {name} must have shape ({rows_name}={rows}, H) with H >= 1; got {tuple(t.shape)}")
        if t.device != graph.device:
            raise ValueError(f"{op}: {name} is on {t.device} but the graph is on {graph.device}")
    if alpha_dst.size(1) != alpha_src.size(1) or alpha_dst.dtype != alpha_src.dtype:
        error = ValueError if alpha_dst.size(1) != alpha_src.size(1) else TypeError
        raise error(f"{op}: alpha_src and alpha_dst must share H and dtype; got {tuple(alpha_src.shape)} "
                    f"{alpha_src.dtype} and {tuple(alpha_dst.shape)} {alpha_dst.dtype}")
    if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real):  # a tensor was told it was not in [0, 1)
        raise TypeError(f"{op}: dropout must be a real number in [0, 1); got {type(dropout).__name__} {dropout!r}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"{op}: dropout must lie in [0, 1); got {dropout!r}")
    return alpha_src.size(1)


def _use_fused(op: str, device: torch.device, dtype: torch.dtype, backend: str | None) -> bool:
    """The one place that picks the fused kernels or the reference composition."""
    name = dispatcher.get_default_backend() if backend is None else backend
    dispatcher.check_backend(op, name, extra=(FUSED,), device=device)
    if name == FUSED:
        if device.type != "cuda":
            raise ValueError(f"{op}: backend 'fused' runs on cuda tensors; got tensors on {device.type}")
        if not runtime.is_available():
            raise RuntimeError(f"{op}: backend 'fused' is not available here (install graphfuse[cuda12] or "
                               "graphfuse[cuda13] for the CuPy kernels)")
        if dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{op}: backend 'fused' supports float32 and float64; got {dtype}")
        return True
    return name == "auto" and device.type == "cuda" and dtype in SUPPORTED_DTYPES and runtime.is_available()


def _seed(dropout: float, training: bool) -> tuple[float, int]:
    """The fused kernels' dropout rate and mask seed. The seed is drawn on the host, so a CUDA graph would replay
    one mask forever: refused under capture (the reference's dropout draws a new mask at each replay)."""
    if not training or dropout == 0.0:
        return 0.0, 0
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise RuntimeError("gat: the fused kernels draw their attention-dropout mask seed on the host, so a CUDA "
                           "graph would replay one mask at every step; capture with backend='reference', or "
                           "without attention dropout")
    return float(dropout), int(torch.randint(0, 2**62, (1,)).item())


def gat_scores(h: Tensor, att_src: Tensor, att_dst: Tensor, *, backend: str | None = None) -> tuple[Tensor, Tensor]:
    """GAT's per-node attention terms ``alpha_src[n, h] = <h[n, h], att_src[h]>`` and the same with ``att_dst``
    (fuseGNN computes them as one small GEMM; the fused path is one launch for both).

    Args:
        h: (N, H, C) per-head node features (``x W`` viewed per head).
        att_src, att_dst: (H, C) or (1, H, C) attention vectors.
        backend: as in :func:`gat_attention`.

    Returns:
        ``(alpha_src, alpha_dst)``, each (N, H).
    """
    if not isinstance(h, Tensor) or not h.is_floating_point():
        raise TypeError(f"gat_scores: h must be a floating-point torch.Tensor; got "
                        f"{getattr(h, 'dtype', type(h).__name__)}")
    if h.dim() != 3:
        raise ValueError(f"gat_scores: h must have shape (N, H, C); got {tuple(h.shape)}")
    for name, att in (("att_src", att_src), ("att_dst", att_dst)):
        if not isinstance(att, Tensor):
            raise TypeError(f"gat_scores: {name} must be a torch.Tensor; got {type(att).__name__}")
        if att.dim() not in (2, 3) or att.shape[-2:] != h.shape[1:] or att.numel() != h.size(1) * h.size(2):
            raise ValueError(f"gat_scores: {name} must have shape (H, C) or (1, H, C) = {tuple(h.shape[1:])}; got "
                             f"{tuple(att.shape)}")
        if att.dtype != h.dtype or att.device != h.device:
            error = TypeError if att.dtype != h.dtype else ValueError
            raise error(f"gat_scores: {name} must match h's dtype and device ({h.dtype}, {h.device}); got "
                        f"{att.dtype}, {att.device}")
    if not _use_fused("gat_scores", h.device, h.dtype, backend):
        return reference_gat_scores(h, att_src, att_dst)
    heads, c = h.shape[1:]
    return run(FusedGatScores, h.contiguous(), att_src.reshape(heads, c).contiguous(),
               att_dst.reshape(heads, c).contiguous())


def gat_attention(
    graph: Graph,
    alpha_src: Tensor,
    alpha_dst: Tensor,
    *,
    negative_slope: float = 0.2,
    dropout: float = 0.0,
    training: bool = False,
    backend: str | None = None,
) -> Tensor:
    """GAT attention coefficients ``dropout(softmax_in(t)(LeakyReLU(alpha_src[s] + alpha_dst[t])))``.

    Args:
        graph: the graph (self-loops as the caller wants them; GATConv adds them first).
        alpha_src, alpha_dst: per-node attention terms ``(x W)^h · att_src^h`` and ``(x W)^h · att_dst^h``.
        negative_slope: LeakyReLU slope.
        dropout: attention dropout probability (applied only when ``training``).
        training: apply dropout.
        backend: ``"fused"`` (CUDA kernels), ``"auto"``/None (fused on CUDA when available, else the
            reference) or any engine backend name (the reference composition through that backend).

    Returns:
        (E, H) coefficients in COO edge order; each target's in-edges sum to 1 per head before dropout.
    """
    _check("gat_attention", graph, alpha_src, alpha_dst, negative_slope, dropout, training)
    if not _use_fused("gat_attention", graph.device, alpha_src.dtype, backend):
        return reference_gat_attention(graph, alpha_src, alpha_dst, negative_slope, dropout, training,
                                       None if backend in (None, FUSED) else backend)
    p, seed = _seed(dropout, training)
    return run(FusedGatAttention, graph, alpha_src.contiguous(), alpha_dst.contiguous(), float(negative_slope),
               p, seed)


def gat_aggregate(
    graph: Graph,
    h: Tensor,
    alpha_src: Tensor,
    alpha_dst: Tensor,
    *,
    negative_slope: float = 0.2,
    dropout: float = 0.0,
    training: bool = False,
    backend: str | None = None,
    return_attention: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """GAT message passing: ``out[t]^h = Σ_{e=(s→t)} alpha^h_e · h[s]^h`` with :func:`gat_attention`'s
    coefficients, without materialising per-edge feature tensors (see the module docstring).

    Args:
        graph, alpha_src, alpha_dst, negative_slope, dropout, training, backend: as in :func:`gat_attention`.
        h: per-head source features.
        return_attention: also return the coefficients the sum used (after dropout). They are then computed
            by :func:`gat_attention` as an (E, H) tensor and summed with :func:`graphfuse.aggregate`, unfused.

    Returns:
        (num_dst, H, C) aggregated features; with ``return_attention``, also the (E, H) coefficients in COO
        edge order.
    """
    heads = _check("gat_aggregate", graph, alpha_src, alpha_dst, negative_slope, dropout, training)
    check_bools("gat_aggregate", return_attention=return_attention)
    if not isinstance(h, Tensor) or not h.is_floating_point():
        raise TypeError(f"gat_aggregate: h must be a floating-point torch.Tensor; got "
                        f"{getattr(h, 'dtype', type(h).__name__)}")
    if h.dim() != 3 or h.size(0) != graph.num_src or h.size(1) != heads:
        raise ValueError(f"gat_aggregate: h must have shape (num_src={graph.num_src}, H={heads}, C); "
                         f"got {tuple(h.shape)}")
    if h.device != graph.device:
        raise ValueError(f"gat_aggregate: h is on {h.device} but the graph is on {graph.device}")
    if return_attention:
        alpha = gat_attention(graph, alpha_src, alpha_dst, negative_slope=negative_slope, dropout=dropout,
                              training=training, backend=backend)
        return _weighted_sum(graph, h, alpha, None if backend == FUSED else backend), alpha
    fused = _use_fused("gat_aggregate", graph.device, alpha_src.dtype, backend)
    if backend == FUSED and h.dtype != alpha_src.dtype:
        raise TypeError(f"gat_aggregate: the fused kernel needs h and the attention scores in one dtype; got "
                        f"{h.dtype} and {alpha_src.dtype} (use backend='reference' or 'auto')")
    if not fused or h.dtype != alpha_src.dtype:
        return reference_gat_aggregate(graph, h, alpha_src, alpha_dst, negative_slope, dropout, training,
                                       None if backend in (None, FUSED) else backend)
    p, seed = _seed(dropout, training)
    out = run(FusedGatAggregate, graph, h.flatten(1).contiguous(), alpha_src.contiguous(),
              alpha_dst.contiguous(), float(negative_slope), p, seed)
    return out.view(graph.num_dst, heads, h.size(2))
