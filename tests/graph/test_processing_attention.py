"""GAT attention of the processing stage: the reference twins on CPU (equal to GATConv's original path,
gradcheck), validation, and the fused CUDA Functions against the reference (values, gradients, dropout,
gradcheck, memory without (E, H, C) tensors)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from graph.processing_cases import processing_graph

import graphfuse
import graphfuse.nn
from cases import poison
from graphfuse import Graph
from graphfuse.engine import attention, gat_aggregate, gat_attention, gat_scores
from graphfuse.engine.reference import edge_softmax as reference_edge_softmax
from graphfuse.graph import norm

# float64: PyTorch's LeakyReLU backward applies the slope in float32 precision (a 1.5e-8 relative offset on
# negative scores); the fused kernels use the exact slope.
# float32 results are compared with a float64 reference (sums over hubs of ~1,000 edges).
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-7, atol=1e-9)}


def attention_inputs(name: str, heads: int, channels: int, dtype: torch.dtype, device="cpu", seed: int = 0,
                     loops: bool = True):
    g = processing_graph(name, False)
    if loops:
        g = norm.add_remaining_self_loops(g)
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(g.num_src, heads, channels, generator=gen, dtype=dtype)
    a_src = torch.randn(g.num_src, heads, generator=gen, dtype=dtype)
    a_dst = torch.randn(g.num_dst, heads, generator=gen, dtype=dtype)
    return g.to(device), h.to(device), a_src.to(device), a_dst.to(device)


# ------------------------------------------------------------------------------------------ CPU
def test_reference_attention_is_gatconvs_original_path():
    g, h, a_src, a_dst = attention_inputs("duplicates_loops", 3, 4, torch.float64)
    src, dst = g.edge_index
    want = reference_edge_softmax(g, F.leaky_relu(a_src[src] + a_dst[dst], 0.2))
    got = gat_attention(g, a_src, a_dst, negative_slope=0.2)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    sums = torch.zeros(g.num_dst, 3, dtype=torch.float64).index_add_(0, dst, got)
    torch.testing.assert_close(sums, torch.ones_like(sums))
    out = gat_aggregate(g, h, a_src, a_dst, negative_slope=0.2)
    torch.testing.assert_close(out, graphfuse.aggregate(g, h, edge_weight=want), rtol=0, atol=0)


def test_reference_dropout_uses_torch_rng():
    g, _, a_src, a_dst = attention_inputs("isolated", 2, 3, torch.float64)
    torch.manual_seed(3)
    got = gat_attention(g, a_src, a_dst, dropout=0.5, training=True)
    torch.manual_seed(3)
    want = F.dropout(gat_attention(g, a_src, a_dst), p=0.5, training=True)
    assert torch.equal(got, want)
    assert torch.equal(gat_attention(g, a_src, a_dst, dropout=0.5, training=False), gat_attention(g, a_src, a_dst))


def test_aggregate_returns_the_attention_it_summed():
    """``return_attention=True``: the coefficients after dropout (torch's stream, as gat_attention draws them)
    and the sum taken with exactly those; the output equals the call without it."""
    g, h, a_src, a_dst = attention_inputs("duplicates_loops", 3, 4, torch.float64)
    torch.manual_seed(3)
    out, alpha = gat_aggregate(g, h, a_src, a_dst, dropout=0.5, training=True, return_attention=True)
    torch.manual_seed(3)
    assert torch.equal(alpha, gat_attention(g, a_src, a_dst, dropout=0.5, training=True))
    assert (alpha == 0).any()
    assert torch.equal(out, graphfuse.aggregate(g, h, edge_weight=alpha))
    plain, alpha = gat_aggregate(g, h, a_src, a_dst, return_attention=True)
    assert torch.equal(plain, gat_aggregate(g, h, a_src, a_dst)) and torch.equal(alpha, gat_attention(g, a_src, a_dst))
    with pytest.raises(TypeError, match="gat_aggregate: return_attention must be a bool; got 1"):
        gat_aggregate(g, h, a_src, a_dst, return_attention=1)


def test_reference_gradcheck():
    g, h, a_src, a_dst = attention_inputs("isolated", 2, 3, torch.float64)
    args = [t.clone().requires_grad_(True) for t in (h, a_src, a_dst)]
    assert torch.autograd.gradcheck(lambda x, s, d: gat_aggregate(g, x, s, d, negative_slope=0.1), args)


def test_gatconv_cpu_unchanged():
    g = processing_graph("isolated", False)
    torch.manual_seed(0)
    conv = graphfuse.nn.GATConv(5, 4, heads=3).double()
    x = torch.randn(g.num_nodes, 5, dtype=torch.float64)
    got = conv(x, g)
    sl = norm.add_remaining_self_loops(g)
    hh = conv.lin(x).view(-1, 3, 4)
    a_s, a_d = (hh * conv.att_src).sum(-1), (hh * conv.att_dst).sum(-1)
    alpha = reference_edge_softmax(sl, F.leaky_relu(a_s[sl.edge_index[0]] + a_d[sl.edge_index[1]], 0.2))
    want = graphfuse.aggregate(sl, hh, edge_weight=alpha).reshape(-1, 12) + conv.bias
    torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize(
    "change, error, match",
    [
        (dict(graph="edges"), TypeError, "gat_attention: graph must be a graphfuse.Graph"),
        (dict(a_src=torch.zeros(3, 2)), ValueError, r"gat_attention: alpha_src must have shape \(num_src=60, H\)"),
        # zero heads reached a division by zero in the CUDA path
        (dict(a_src=torch.zeros(60, 0), a_dst=torch.zeros(60, 0)), ValueError, "alpha_src must have shape .* H >= 1"),
        (dict(a_dst=torch.zeros(60, 3)), ValueError, "alpha_src and alpha_dst must share H and dtype"),
        (dict(a_dst=torch.zeros(60, 2, dtype=torch.float64)), TypeError, "alpha_src and alpha_dst must share H and"),
        (dict(a_dst=torch.zeros(60, 2, dtype=torch.int64)), TypeError, "alpha_dst must be a floating-point"),
        (dict(dropout=1.5), ValueError, r"dropout must lie in \[0, 1\)"),
        # a tensor or a bool was told it did not lie in [0, 1) (review)
        (dict(dropout=torch.tensor(0.5)), TypeError, r"dropout must be a real number in \[0, 1\); got Tensor"),
        (dict(dropout=True), TypeError, r"dropout must be a real number in \[0, 1\); got bool True"),
        (dict(backend="fused"), ValueError, "backend 'fused' runs on cuda tensors; got tensors on cpu"),
        # NaN gave NaN coefficients, a str failed inside leaky_relu, and a truthy str turned dropout on (review)
        (dict(negative_slope=float("nan")), ValueError, "negative_slope must be a finite real number; got nan"),
        (dict(negative_slope="0.2"), TypeError, "negative_slope must be a real number; got '0.2'"),
        (dict(training="False"), TypeError, "training must be a bool; got 'False'"),
        # a CUDA-only backend ran gat_scores' reference silently and named edge_softmax in gat_attention (review)
        (dict(backend="gespmm"), ValueError, r"gat_attention: backend 'gespmm' runs on \['cuda'\] tensors; got tensors on cpu"),
    ],
)
@pytest.mark.parametrize("op", ["gat_attention", "gat_aggregate"])
def test_attention_validation(change, error, match, op):
    g, h, _, _ = attention_inputs("isolated", 2, 3, torch.float32)
    args = dict(graph=g, a_src=torch.zeros(60, 2), a_dst=torch.zeros(60, 2), dropout=0.0, backend=None,
                negative_slope=0.2, training=False)
    args.update(change)
    call = {"gat_attention": lambda *a, **k: gat_attention(*a, **k),
            "gat_aggregate": lambda graph, *a, **k: gat_aggregate(graph, h, *a, **k)}[op]
    with pytest.raises(error, match=match.replace("gat_attention", op)):
        call(args["graph"], args["a_src"], args["a_dst"], dropout=args["dropout"], backend=args["backend"],
             negative_slope=args["negative_slope"], training=args["training"])


def test_numpy_dropout_rates_are_accepted():
    """np.float32 is not a float subclass: a valid rate was refused with 'dropout must lie in [0, 1)'."""
    g, h, a_src, a_dst = attention_inputs("isolated", 2, 3, torch.float32)
    for rate in (np.float32(0.5), np.float64(0.5)):
        torch.manual_seed(0)
        got = gat_attention(g, a_src, a_dst, dropout=rate, training=True)
        torch.manual_seed(0)
        torch.testing.assert_close(got, gat_attention(g, a_src, a_dst, dropout=0.5, training=True), rtol=0, atol=0)
        torch.manual_seed(0)
        got = gat_aggregate(g, h, a_src, a_dst, dropout=rate, training=True)
        torch.manual_seed(0)
        torch.testing.assert_close(got, gat_aggregate(g, h, a_src, a_dst, dropout=0.5, training=True), rtol=0, atol=0)


def test_aggregate_validation():
    g, h, a_src, a_dst = attention_inputs("isolated", 2, 3, torch.float32)
    with pytest.raises(ValueError, match=r"gat_aggregate: h must have shape \(num_src=60, H=2, C\)"):
        gat_aggregate(g, h[:, :1], a_src, a_dst)
    # the device first: the dtype error below came before it on CPU (review); on CUDA see the GPU test
    with pytest.raises(ValueError, match="gat_aggregate: backend 'fused' runs on cuda tensors; got tensors on cpu"):
        gat_aggregate(g, h.double(), a_src, a_dst, backend="fused")


def test_reference_scores_and_validation():
    h = torch.randn(5, 3, 4, dtype=torch.float64)
    att_src, att_dst = torch.randn(1, 3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    a_src, a_dst = gat_scores(h, att_src, att_dst)
    torch.testing.assert_close(a_src, (h * att_src).sum(-1), rtol=0, atol=0)
    torch.testing.assert_close(a_dst, torch.einsum("nhc,hc->nh", h, att_dst))
    with pytest.raises(ValueError, match=r"gat_scores: att_dst must have shape \(H, C\) or \(1, H, C\)"):
        gat_scores(h, att_src, torch.randn(3, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"gat_scores: backend 'gar' runs on \['cuda'\] tensors; got tensors on cpu"):
        gat_scores(h, att_src, att_dst, backend="gar")  # ran the reference silently (review)
    with pytest.raises(ValueError, match=r"gat_scores: att_src must have shape .*; got \(1, 1, 3, 4\)"):
        gat_scores(h, att_src[None], att_dst)  # passed, and gave (1, N, H) scores (review)
    with pytest.raises(TypeError, match="gat_scores: att_src must match h's dtype"):
        gat_scores(h, att_src.float(), att_dst)  # a ValueError before (review)
    with pytest.raises(ValueError, match=r"gat_scores: h must have shape \(N, H, C\); got \(3, 4\)"):
        gat_scores(h[0], att_src, att_dst)
    with pytest.raises(ValueError, match="gat_scores: unknown backend 'bogus'; valid: .*'fused'"):
        gat_scores(h, att_src, att_dst, backend="bogus")  # ran the reference, silently
    with pytest.raises(TypeError, match=r"gat_scores: backend must be a backend name \(str\); got int"):
        gat_scores(h, att_src, att_dst, backend=3)


# ------------------------------------------------------------------------------------------ GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("heads, channels", [(1, 1), (3, 7), (10, 16)])
def test_fused_scores_match_reference(dtype, heads, channels):
    gen = torch.Generator().manual_seed(heads)
    h = torch.randn(257, heads, channels, generator=gen, dtype=dtype).cuda()
    att_src = torch.randn(1, heads, channels, generator=gen, dtype=dtype).cuda()
    att_dst = torch.randn(1, heads, channels, generator=gen, dtype=dtype).cuda()
    grads = [torch.randn(257, heads, dtype=dtype, device="cuda") for _ in range(2)]

    def run(backend, as64):
        leaves = [t.detach().clone().to(torch.float64 if as64 else dtype).requires_grad_(True)
                  for t in (h, att_src, att_dst)]
        outs = gat_scores(*leaves, backend=backend)
        torch.autograd.backward(outs, [g.to(leaves[0].dtype) for g in grads])
        return [o.detach() for o in outs] + [t.grad for t in leaves]

    for got, want in zip(run("fused", False), run("reference", True)):
        assert_close64(got, want, dtype)
    leaves = [t.double().requires_grad_(True) for t in (h[:20], att_src.reshape(heads, channels),
                                                        att_dst.reshape(heads, channels))]
    assert torch.autograd.gradcheck(lambda *a: attention.FusedGatScores.apply(*a), leaves)

CASES = ["isolated", "duplicates_loops", "warp_hub", "bipartite"]


def _reference_grads(fn, inputs, grad, dtype=None):
    """Output and input gradients of ``fn`` (on copies cast to ``dtype``, e.g. float64 for the oracle)."""
    leaves = [t.detach().clone().to(dtype or t.dtype).requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    out.backward(grad.to(dtype or grad.dtype))
    return out.detach(), [t.grad for t in leaves]


def assert_close64(got, want, dtype):
    torch.testing.assert_close(got.double(), want.double(), **TOL[dtype])


@pytest.mark.gpu
@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("heads", [1, 3, 10])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_attention_matches_reference(name, heads, dtype):
    g, _, a_src, a_dst = attention_inputs(name, heads, 5, dtype, "cuda", loops=name != "bipartite")
    grad = torch.randn(g.num_edges, heads, dtype=dtype, device="cuda")
    want, want_grads = _reference_grads(
        lambda s, d: gat_attention(g, s, d, negative_slope=0.2, backend="reference"), (a_src, a_dst), grad,
        torch.float64)
    got, got_grads = _reference_grads(
        lambda s, d: gat_attention(g, s, d, negative_slope=0.2, backend="fused"), (a_src, a_dst), grad)
    assert got.dtype == dtype
    assert_close64(got, want, dtype)
    for a, b in zip(got_grads, want_grads):
        assert_close64(a, b, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("heads", [1, 4, 10])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fused_aggregate_matches_reference(name, heads, dtype):
    g, h, a_src, a_dst = attention_inputs(name, heads, 7, dtype, "cuda", loops=name != "bipartite")
    grad = torch.randn(g.num_dst, heads, 7, dtype=dtype, device="cuda")
    want, want_grads = _reference_grads(
        lambda x, s, d: gat_aggregate(g, x, s, d, negative_slope=0.15, backend="reference"), (h, a_src, a_dst), grad,
        torch.float64)
    got, got_grads = _reference_grads(
        lambda x, s, d: gat_aggregate(g, x, s, d, negative_slope=0.15, backend="fused"), (h, a_src, a_dst), grad)
    assert got.dtype == dtype
    assert_close64(got, want, dtype)
    for a, b in zip(got_grads, want_grads):
        assert_close64(a, b, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("backend", [None, "fused", "gespmm"])
def test_aggregate_with_attention_on_cuda_matches_reference(name, backend):
    """``return_attention=True`` on CUDA (None/"fused": the fused attention, then the engine's per-head
    aggregation; "gespmm": the reference attention composed on GE-SpMM): output, coefficients and the gradients
    through both against the float64 reference, outputs poisoned; with dropout, the kept coefficients are the
    undropped ones / (1 - p), about p of them are zero, and the output is the sum taken with them."""
    g, h, a_src, a_dst = attention_inputs(name, 4, 7, torch.float32, "cuda", seed=1, loops=name != "bipartite")
    grads = (torch.randn(g.num_dst, 4, 7, device="cuda"), torch.randn(g.num_edges, 4, device="cuda"))

    def run(dtype, backend):
        poison()  # not an earlier test's (or run's) outputs
        leaves = [t.detach().to(dtype).requires_grad_(True) for t in (h, a_src, a_dst)]
        outs = gat_aggregate(g, *leaves, negative_slope=0.15, backend=backend, return_attention=True)
        torch.autograd.backward(outs, [t.to(dtype) for t in grads])
        return [o.detach() for o in outs], [t.grad for t in leaves]

    (want, want_alpha), want_grads = run(torch.float64, "reference")
    (got, got_alpha), got_grads = run(torch.float32, backend)
    assert_close64(got, want, torch.float32)
    assert_close64(got_alpha, want_alpha, torch.float32)
    for a, b in zip(got_grads, want_grads):
        assert_close64(a, b, torch.float32)
    p = 0.4
    poison()
    out, alpha = gat_aggregate(g, h, a_src, a_dst, negative_slope=0.15, dropout=p, training=True, backend=backend,
                               return_attention=True)
    kept = alpha != 0
    assert abs(1 - kept.double().mean().item() - p) < 5 * (p * (1 - p) / alpha.numel()) ** 0.5
    torch.testing.assert_close(alpha[kept], got_alpha[kept] / (1 - p), **TOL[torch.float32])
    torch.testing.assert_close(out, graphfuse.aggregate(g, h, edge_weight=alpha, backend="reference"),
                               **TOL[torch.float32])


@pytest.mark.gpu
def test_fused_aggregate_refuses_mixed_dtypes():
    g, h, a_src, a_dst = attention_inputs("isolated", 2, 3, torch.float32, "cuda")
    with pytest.raises(TypeError, match="gat_aggregate: the fused kernel needs h and the attention scores in one"):
        gat_aggregate(g, h.double(), a_src, a_dst, backend="fused")  # was the reference, silently


@pytest.mark.gpu
def test_fused_dropout_mask_is_consistent_and_differentiated():
    p = 0.4
    g, h, a_src, a_dst = attention_inputs("warp_hub", 4, 6, torch.float64, "cuda")
    plain = gat_attention(g, a_src, a_dst, backend="fused")
    torch.manual_seed(11)
    dropped = gat_attention(g, a_src, a_dst, dropout=p, training=True, backend="fused")
    kept = dropped != 0
    assert abs(1 - kept.double().mean().item() - p) < 0.03
    torch.testing.assert_close(dropped[kept], plain[kept] / (1 - p), **TOL[torch.float64])
    grad = torch.randn(g.num_dst, 4, 6, dtype=torch.float64, device="cuda")
    torch.manual_seed(11)  # the same seed: the same mask inside the fused aggregation
    got, got_grads = _reference_grads(
        lambda x, s, d: gat_aggregate(g, x, s, d, dropout=p, training=True, backend="fused"), (h, a_src, a_dst), grad)
    mask = kept.double() / (1 - p)
    want, want_grads = _reference_grads(
        lambda x, s, d: graphfuse.aggregate(g, x, gat_attention(g, s, d, backend="reference") * mask,
                                            backend="reference"), (h, a_src, a_dst), grad)
    torch.testing.assert_close(got, want, **TOL[torch.float64])
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a, b, **TOL[torch.float64])


@pytest.mark.gpu
def test_fused_functions_gradcheck():
    g, h, a_src, a_dst = attention_inputs("duplicates_loops", 2, 3, torch.float64, "cuda")
    g = graphfuse.graph.build_formats(g)
    leaves = [t.clone().requires_grad_(True) for t in (h.reshape(g.num_src, -1), a_src, a_dst)]
    for p in (0.0, 0.3):
        assert torch.autograd.gradcheck(
            lambda s, d, p=p: attention.FusedGatAttention.apply(g, s, d, 0.2, p, 1234), leaves[1:])
        assert torch.autograd.gradcheck(
            lambda x, s, d, p=p: attention.FusedGatAggregate.apply(g, x, s, d, 0.2, p, 1234), leaves)


@pytest.mark.gpu
def test_fused_aggregate_memory_has_no_per_edge_feature_tensor():
    n, e, heads, c = 4000, 600_000, 4, 64
    gen = torch.Generator().manual_seed(0)
    ei = torch.randint(0, n, (2, e), generator=gen)
    g = graphfuse.graph.add_remaining_self_loops(Graph(ei, num_nodes=n).to("cuda"))
    num_e = g.num_edges
    h = torch.randn(n, heads, c, device="cuda", requires_grad=True)
    a_src = torch.randn(n, heads, device="cuda", requires_grad=True)
    a_dst = torch.randn(n, heads, device="cuda", requires_grad=True)
    grad = torch.randn(n, heads, c, device="cuda")

    def step():
        h.grad = a_src.grad = a_dst.grad = None
        gat_aggregate(g, h, a_src, a_dst, dropout=0.5, training=True, backend="fused").backward(grad)

    step()  # warm-up: compiles, builds the cached row schedules
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    node_tensors = 3 * n * heads * c * 4 + 8 * n * heads * 4  # out, dh (+ its grad buffer), per-node stats
    assert extra <= 3 * num_e * heads * 4 + node_tensors + (1 << 20), extra
    assert extra < num_e * heads * c * 4 / 4  # far below a single (E, H, C) float32 tensor


@pytest.mark.gpu
def test_gatconv_cuda_matches_cpu():
    g = processing_graph("warp_hub", False)
    torch.manual_seed(0)
    conv = graphfuse.nn.GATConv(6, 5, heads=4).double().eval()
    x = torch.randn(g.num_nodes, 6, dtype=torch.float64)
    want = conv(x, g)
    want.sum().backward()
    want_grads = [p.grad.clone() for p in conv.parameters()]
    conv.zero_grad()
    _, (edges, alpha) = conv(x, g, return_attention_weights=True)
    conv_cuda = conv.to("cuda")
    got = conv_cuda(x.to("cuda"), g.to("cuda"))
    got.sum().backward()
    torch.testing.assert_close(got.cpu(), want, **TOL[torch.float64])
    for p, w in zip(conv_cuda.parameters(), want_grads):
        torch.testing.assert_close(p.grad.cpu(), w, **TOL[torch.float64])
    out, (got_edges, got_alpha) = conv_cuda(x.to("cuda"), g.to("cuda"), return_attention_weights=True)
    torch.testing.assert_close(out.cpu(), want, **TOL[torch.float64])
    assert torch.equal(got_edges.cpu(), edges)
    torch.testing.assert_close(got_alpha.cpu(), alpha, **TOL[torch.float64])


@pytest.mark.gpu
def test_gatconv_under_autocast_on_cuda_sums_in_float32_with_the_fused_kernels(monkeypatch):
    """Under bfloat16 autocast the layer's features are bfloat16 and its attention vectors float32: the layer sums
    in float32 as PyG does (a float32 output also without bias), which on CUDA is the fused kernels' dtype; before,
    the default backend took the reference composition in bfloat16 and backend="fused" raised a TypeError."""
    g = processing_graph("warp_hub", False).to("cuda")
    torch.manual_seed(0)
    conv = graphfuse.nn.GATConv(6, 5, heads=4, bias=False).to("cuda").eval()
    x = torch.randn(g.num_nodes, 6, device="cuda")
    fused_calls = []
    run = attention.run
    monkeypatch.setattr(attention, "run", lambda fn, *a: fused_calls.append(fn.__name__) or run(fn, *a))
    names = ["out", "x", *(name for name, _ in conv.named_parameters())]
    results = {}
    for backend in (None, "fused", "reference"):
        conv.backend = backend
        x_grad = x.clone().requires_grad_()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = conv(x_grad, g)
        assert out.dtype == torch.float32
        results[backend] = (out, *torch.autograd.grad(out.square().sum(), [x_grad, *conv.parameters()]))
    assert fused_calls.count("FusedGatAggregate") == 2  # the default and "fused", not "reference"
    for backend in (None, "fused"):
        for name, got, want in zip(names, results[backend], results["reference"], strict=True):
            # the gradients of x and of the linear weight pass the bfloat16 product's backward: float32 sums in
            # another order (the reference's atomics) round to a neighbouring bfloat16 (seen: 3 of 12,000)
            tol = (dict(rtol=2**-7, atol=2**-7 * want.abs().max().item()) if name in ("x", "lin.weight")
                   else TOL[torch.float32])
            torch.testing.assert_close(got, want, **tol, msg=lambda m, name=name: f"{backend} {name}: {m}")


def test_attention_launchers_check_before_reading_their_arguments():
    """Each launcher names the bad argument even when it is not a tensor at all (they read sizes first)."""
    from graphfuse.kernels import gat_attention as launchers

    rowptr, col32, perm = torch.tensor([0, 1, 3, 4]), torch.tensor([0, 1, 2, 0], dtype=torch.int32), torch.arange(4)
    a, b, row_max, row_sum = torch.randn(3, 2), torch.randn(3, 2), torch.zeros(3, 2), torch.ones(3, 2)
    with pytest.raises(ValueError, match="gat_softmax: a_src must have 2 dimensions"):
        launchers.softmax_forward(rowptr, col32, perm, a[:, 0].contiguous(), b)
    with pytest.raises(TypeError, match="gat_softmax: col32 must be a torch.Tensor"):
        launchers.softmax_forward(rowptr, [0, 1, 2, 0], perm, a, b)
    with pytest.raises(TypeError, match="gat_alpha_entries: src must be a torch.Tensor"):
        launchers.alpha_entries([0, 1, 2, 0], col32, perm, a, b, row_max, row_sum)
    with pytest.raises(TypeError, match="gat_softmax_backward: col32 must be a torch.Tensor"):
        launchers.softmax_backward(rowptr, [0, 1, 2, 0], perm, rowptr, col32, perm, torch.randn(4, 2), None, perm,
                                   a, b, row_max, row_sum)


def test_gat_attention_refuses_dropout_one():
    g = Graph(torch.randint(0, 20, (2, 80), generator=torch.Generator().manual_seed(0)), num_nodes=20)
    a = torch.randn(g.num_nodes, 2)
    with pytest.raises(ValueError, match=r"dropout must lie in \[0, 1\)"):
        gat_attention(g, a, a, dropout=1.0, training=True)


def test_gat_scores_tell_type_from_shape():
    h, att = torch.randn(4, 2, 3), torch.randn(2, 3)
    with pytest.raises(TypeError, match="gat_scores: att_src must be a torch.Tensor; got ndarray"):
        gat_scores(h, att.numpy(), att)
    with pytest.raises(TypeError, match="gat_scores: h must be a floating-point torch.Tensor; got torch.int64"):
        gat_scores(h.long(), att, att)


def test_gat_scores_refuse_per_node_attention_vectors():
    """att_src is one (H, C) vector per head; an (N, H, C) tensor broadcast against h's (N, H, C) and gave each
    node its own attention vector (mutant A02 checked only the trailing (H, C))."""
    h = torch.randn(5, 3, 4)
    att = torch.randn(3, 4)
    for bad in (torch.randn(5, 3, 4), torch.randn(2, 3, 4)):
        with pytest.raises(ValueError, match=r"gat_scores: att_src must have shape \(H, C\) or \(1, H, C\)"):
            gat_scores(h, bad, att)
        with pytest.raises(ValueError, match=r"gat_scores: att_dst must have shape \(H, C\) or \(1, H, C\)"):
            gat_scores(h, att, bad)


@pytest.mark.parametrize("training", [False, True])
def test_gat_ops_refuse_a_negative_dropout(training):
    """Mutant A04 checked only the upper bound: a negative rate then failed inside torch's F.dropout with a
    message naming neither the op nor the argument."""
    g = Graph(torch.randint(0, 20, (2, 80), generator=torch.Generator().manual_seed(0)), num_nodes=20)
    a = torch.randn(g.num_nodes, 2)
    h = torch.randn(g.num_nodes, 2, 3)
    with pytest.raises(ValueError, match=r"gat_attention: dropout must lie in \[0, 1\); got -0.1"):
        gat_attention(g, a, a, dropout=-0.1, training=training)
    with pytest.raises(ValueError, match=r"gat_aggregate: dropout must lie in \[0, 1\); got -0.1"):
        gat_aggregate(g, h, a, a, dropout=-0.1, training=training)
