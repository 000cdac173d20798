"""The CUDA host-side paths at the public entry points (aggregate, sddmm, edge_softmax, the GAT ops, layers): input
layouts, requires_grad / inference / no_grad combinations, streams, CUDA-graph capture, extreme widths and sizes.
Every CUDA result (values and gradients) is compared with the CPU "reference" backend in float64; outputs come out
of an allocator poisoned with NaN, so an element a kernel never wrote shows up. Written from a review of the host
code (session 26); the tests whose docstring says "found by review" failed before their fix.
"""

from __future__ import annotations

import pytest
import torch

import graphfuse
import graphfuse.nn
from cases import make_graph_case, poison
from graphfuse.engine import autograd, dispatcher, gat_aggregate, gat_attention, gat_scores
from graphfuse.graph import process_gcn
from graphfuse.kernels import runtime

GPU_OK = torch.cuda.is_available() and runtime.is_available()
gpu = pytest.mark.gpu
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not GPU_OK, reason="needs a CUDA device and CuPy")]

BACKENDS = ["gespmm", "gar", "gas", "hpspmm"]
# a reduce per backend that runs the backend's own kernel (gas/hpspmm hand max/min to GE-SpMM)
OWN_REDUCE = {"gespmm": "max", "gar": "sum", "gas": "mean", "hpspmm": "sum"}
CUDA = "cuda"


# ------------------------------------------------------------------------------------------ helpers
@pytest.fixture(autouse=True)
def _poison_allocator():
    """Free blocks of the caching allocator hold NaN, so unwritten output elements are NaN (run_case and the
    loops poison again before each call: an earlier call's freed output may hold the right values)."""
    if GPU_OK:
        poison()
    yield
    if GPU_OK:
        torch.cuda.synchronize()


def graphs(case: str = "hub"):
    """(CPU graph, a fresh CUDA graph with the same edges and nothing cached)."""
    gc = make_graph_case(case)
    gg = graphfuse.Graph(gc.edge_index.to(CUDA), num_src=gc.num_src, num_dst=gc.num_dst)
    return gc, gg


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rand(*shape, seed=0, dtype=torch.float64, low=None):
    t = torch.randn(*shape, generator=gen(seed), dtype=dtype) if low is None else \
        torch.rand(*shape, generator=gen(seed), dtype=dtype) + low
    return t


def check(got, want, dtype=torch.float32, what="output"):
    """got (any device/dtype) against the float64 reference want: same shape, no NaN where want has none
    (poisoned memory), within a tolerance scaled by want's magnitude."""
    assert got is not None, f"{what}: missing (no gradient computed?)"
    assert want is not None, f"{what}: the reference has none"
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    g, w = got.detach().cpu().double(), want.detach().cpu().double()
    assert not (g.isnan() & ~w.isnan()).any(), f"{what}: NaN where the reference has none (unwritten memory?)"
    tol = 1e-4 if dtype in (torch.float32,) else 1e-9
    scale = 1.0 + (w.nan_to_num(0, 0, 0).abs().max().item() if w.numel() else 0.0)
    torch.testing.assert_close(g, w, rtol=tol, atol=tol * scale, equal_nan=True,
                               msg=lambda m: f"{what}: {m}")


def reference(gc, x, w, reduce, grad, x_grad=True, w_grad=True):
    """float64 CPU reference output and gradients (None where not asked)."""
    xr = x.detach().cpu().double().requires_grad_(x_grad)
    wr = None if w is None else w.detach().cpu().double().requires_grad_(w_grad)
    out = graphfuse.aggregate(gc, xr, wr, reduce, backend="reference")
    if grad is not None and (x_grad or (wr is not None and w_grad)):
        out.backward(grad.detach().cpu().double())
    return out.detach(), xr.grad, (None if wr is None else wr.grad)


def run_case(gc, gg, x, w, reduce, backend, dtype=torch.float32, grad_seed=7):
    """aggregate on CUDA (x/w as given, gradients as their requires_grad says) against the reference."""
    poison()
    out = graphfuse.aggregate(gg, x, w, reduce, backend=backend)
    grad = rand(*out.shape, seed=grad_seed)
    needs = x.requires_grad or (w is not None and w.requires_grad)
    if needs:
        out.backward(grad.to(CUDA, out.dtype))
    ref, rdx, rdw = reference(gc, x, w, reduce, grad if needs else None, x.requires_grad,
                              w is not None and w.requires_grad)
    check(out, ref, dtype, f"{backend}/{reduce} output")
    return rdx, rdw


# ------------------------------------------------------------------------------------------ A: strided x
LAYOUTS = ["col_slice", "transposed", "expand_rows", "misaligned_offset", "row_offset"]


def layout(name: str, n: int, k: int, seed: int = 1):
    """(float64 CPU base, view function): the view of the base is the (n, k) feature matrix."""
    if name == "col_slice":
        return rand(n, 2 * k, seed=seed), lambda b: b[:, ::2]
    if name == "transposed":  # x.t().contiguous().t()
        return rand(k, n, seed=seed), lambda b: b.t()
    if name == "expand_rows":  # stride 0
        return rand(1, k, seed=seed), lambda b: b.expand(n, k)
    if name == "misaligned_offset":  # contiguous, storage offset 1 element: no 16-byte alignment
        return rand(n * k + 1, seed=seed), lambda b: b[1:].view(n, k)
    if name == "row_offset":  # contiguous, storage offset of 3 rows
        return rand(n + 3, k, seed=seed), lambda b: b[3:]
    raise KeyError(name)


@gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", LAYOUTS)
def test_strided_and_offset_features(name, backend):
    """Non-contiguous, stride-0 and storage-offset x through the engine, values and gradients (into the base
    tensor through the view) against the reference; weights need a gradient too."""
    reduce = OWN_REDUCE[backend]
    gc, gg = graphs("hub")
    base, view = layout(name, gc.num_src, 64)
    base_c = base.to(CUDA, torch.float32).requires_grad_()
    w = rand(gc.num_edges, seed=2, low=0.5)
    w_c = w.to(CUDA, torch.float32).requires_grad_()
    out = graphfuse.aggregate(gg, view(base_c), w_c, reduce, backend=backend)
    grad = rand(*out.shape, seed=3)
    out.backward(grad.to(CUDA, torch.float32))
    base_r, w_r = base.clone().requires_grad_(), w.clone().requires_grad_()
    ref = graphfuse.aggregate(gc, view(base_r), w_r, reduce, backend="reference")
    ref.backward(grad)
    check(out, ref, what="output")
    check(base_c.grad, base_r.grad, what="grad of the base of x")
    check(w_c.grad, w_r.grad, what="grad of w")


# ------------------------------------------------------------------------------------------ B: edge weights
W_LAYOUTS = ["strided", "stride0", "heads_transposed", "heads_expand", "one_head_strided"]


@gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", W_LAYOUTS)
def test_edge_weight_layouts(name, backend):
    """Edge weights that are strided, stride-0 (expand of a scalar) or non-contiguous per head (3-D x),
    values and weight gradients (into the base of the view). Per-head weights on hpspmm run GE-SpMM's sum
    (autograd._function)."""
    reduce = {"gespmm": "max", "gar": "mean", "gas": "sum", "hpspmm": "sum"}[backend]
    gc, gg = graphs("unsorted")
    n, e, heads, c = gc.num_src, gc.num_edges, 3, 8
    if name == "strided":
        wb, view, xs = rand(2 * e, seed=4, low=0.5), (lambda b: b[::2]), (n, 24)
    elif name == "stride0":
        wb, view, xs = rand(1, seed=4, low=0.5), (lambda b: b.expand(e)), (n, 24)
    elif name == "heads_transposed":
        wb, view, xs = rand(heads, e, seed=4, low=0.5), (lambda b: b.t()), (n, heads, c)
    elif name == "heads_expand":
        wb, view, xs = rand(1, heads, seed=4, low=0.5), (lambda b: b.expand(e, heads)), (n, heads, c)
    else:  # (E, 1) column of an (E, 2) tensor with (N, 1, C) features
        wb, view, xs = rand(e, 2, seed=4, low=0.5), (lambda b: b[:, 1:2]), (n, 1, c)
    x = rand(*xs, seed=5)
    x_c = x.to(CUDA, torch.float32).requires_grad_()
    wb_c = wb.to(CUDA, torch.float32).requires_grad_()
    out = graphfuse.aggregate(gg, x_c, view(wb_c), reduce, backend=backend)
    grad = rand(*out.shape, seed=6)
    out.backward(grad.to(CUDA, torch.float32))
    x_r, wb_r = x.clone().requires_grad_(), wb.clone().requires_grad_()
    ref = graphfuse.aggregate(gc, x_r, view(wb_r), reduce, backend="reference")
    ref.backward(grad)
    check(out, ref, what="output")
    check(x_c.grad, x_r.grad, what="grad of x")
    check(wb_c.grad, wb_r.grad, what="grad of the weights' base")


@gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_three_d_features_with_non_contiguous_heads(backend, monkeypatch):
    """(N, H, C) features as a transposed (N, C, H) tensor, per-head weights; sum and max. HP-SpMM takes one weight
    per edge (it hands per-head weights and max to GE-SpMM, autograd._function): its sum is counted to run."""
    hp_calls = []
    apply = autograd.HpSpmmAggregate.apply
    monkeypatch.setattr(autograd.HpSpmmAggregate, "apply", staticmethod(lambda *a: hp_calls.append(1) or apply(*a)))
    gc, gg = graphs("hub")
    base = rand(gc.num_src, 16, 4, seed=8)
    w = rand(gc.num_edges, *(() if backend == "hpspmm" else (4,)), seed=9, low=0.5)
    for reduce in ("sum", "max"):
        base_c = base.to(CUDA, torch.float32).requires_grad_()
        w_c = w.to(CUDA, torch.float32).requires_grad_()
        out = graphfuse.aggregate(gg, base_c.transpose(1, 2), w_c, reduce, backend=backend)
        grad = rand(*out.shape, seed=10)
        out.backward(grad.to(CUDA, torch.float32))
        base_r, w_r = base.clone().requires_grad_(), w.clone().requires_grad_()
        ref = graphfuse.aggregate(gc, base_r.transpose(1, 2), w_r, reduce, backend="reference")
        ref.backward(grad)
        check(out, ref, what=f"{reduce} output")
        check(base_c.grad, base_r.grad, what=f"{reduce} grad of x")
        check(w_c.grad, w_r.grad, what=f"{reduce} grad of w")
    assert len(hp_calls) == (backend == "hpspmm")  # the sum


# ------------------------------------------------------------------------------------------ D: requires_grad
@gpu
@pytest.mark.parametrize("which", ["x_only", "w_only"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_gradient_of_one_operand_only(backend, which):
    """Only x, or only the edge weights, need a gradient (the existing suite always asks for both): sum, mean,
    max on a hub graph (row splitting) and a bipartite block."""
    for case in ("hub", "bipartite"):
        gc, gg = graphs(case)
        for reduce in ("sum", "mean", "max"):
            x = rand(gc.num_src, 41, seed=11).to(CUDA, torch.float32).requires_grad_(which == "x_only")
            w = rand(gc.num_edges, seed=12, low=0.5).to(CUDA, torch.float32).requires_grad_(which == "w_only")
            rdx, rdw = run_case(gc, gg, x, w, reduce, backend)
            if which == "x_only":
                check(x.grad, rdx, what=f"{case}/{reduce} grad of x")
                assert w.grad is None
            else:
                check(w.grad, rdw, what=f"{case}/{reduce} grad of w")
                assert x.grad is None


@gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_inference_features_with_learned_weights(backend):
    """Found by review (autograd.py: GespmmAggregate/GarAggregate/GasAggregate/HpSpmmAggregate.forward save x
    with ctx.save_for_backward): features created under torch.inference_mode (a contiguous inference tensor, kept
    as is by BoundAggregate) and edge weights that need a gradient. The reference saves only the gathered
    messages and trains; the kernel backends raise "Inference tensors cannot be saved for backward"."""
    gc, gg = graphs("unsorted")
    with torch.inference_mode():
        x = rand(gc.num_src, 16, seed=13).to(CUDA, torch.float32)
    w = rand(gc.num_edges, seed=14, low=0.5).to(CUDA, torch.float32).requires_grad_()
    out_ref = graphfuse.aggregate(gg, x, w, "sum", backend="reference")  # the reference on CUDA takes it
    out_ref.sum().backward()
    w.grad = None
    _, rdw = run_case(gc, gg, x, w, "sum", backend)
    check(w.grad, rdw, what="grad of w")


@gpu
def test_sddmm_of_inference_operand_and_learned_operand():
    """Found by review (autograd.Sddmm.forward saves a and b): sddmm(a, b) with a an inference tensor and b
    needing a gradient trains on the reference (it saves gathered rows) but raises on the kernel backends."""
    gc, gg = graphs("unsorted")
    with torch.inference_mode():
        a = rand(gc.num_dst, 12, seed=15).to(CUDA, torch.float32)
    b = rand(gc.num_src, 12, seed=16).to(CUDA, torch.float32).requires_grad_()
    out = graphfuse.sddmm(gg, a, b, backend="gespmm")
    grad = rand(gc.num_edges, seed=17)
    out.backward(grad.to(CUDA, torch.float32))
    br = b.detach().cpu().double().requires_grad_()
    ref = graphfuse.sddmm(gc, a.cpu().double(), br, backend="reference")
    ref.backward(grad)
    check(out, ref, what="sddmm")
    check(b.grad, br.grad, what="grad of b")


@gpu
@pytest.mark.parametrize("backend", ["reference", *BACKENDS])
def test_inference_weights_with_learned_operands(backend):
    """Found by session 27's review: weights made under torch.inference_mode times operands that need a gradient.
    The kernel backends' aggregate copies them (autograd._saveable); the reference's product and every backend's
    sddmm, which multiplies by the weights after the kernel, saved them for backward and raised."""
    gc, gg = graphs("unsorted")
    with torch.inference_mode():
        w = rand(gc.num_edges, seed=18, low=0.5).to(CUDA, torch.float32)
    x = rand(gc.num_src, 16, seed=19).to(CUDA, torch.float32).requires_grad_()
    a = rand(gc.num_dst, 16, seed=20).to(CUDA, torch.float32)
    grads = rand(gc.num_dst, 16, seed=21), rand(gc.num_edges, seed=22)  # not .sum(): its gradient ignores the forward
    outs = graphfuse.aggregate(gg, x, w, "sum", backend=backend), graphfuse.sddmm(gg, a, x, w, backend=backend)
    torch.autograd.backward(outs, [g.to(CUDA, torch.float32) for g in grads])
    xr = x.detach().cpu().double().requires_grad_()
    wr = w.cpu().double()
    wants = (graphfuse.aggregate(gc, xr, wr, "sum", backend="reference"),
             graphfuse.sddmm(gc, a.cpu().double(), xr, wr, backend="reference"))
    torch.autograd.backward(wants, list(grads))
    check(outs[0], wants[0], what="aggregate")
    check(outs[1], wants[1], what="sddmm")
    check(x.grad, xr.grad, what="grad of x")


@gpu
def test_inference_mode_first_then_training_on_cuda():
    """The first use of a CUDA graph under torch.inference_mode (formats, int32 indices, permuted weights, row
    schedule, kept split-row workspaces, the GAT statistics' formats) must serve training afterwards."""
    gc, gg = graphs("hub")
    w = rand(gc.num_edges, seed=18, low=0.5)
    gg.edge_weight = w.to(CUDA, torch.float32)
    gc.edge_weight = w.clone()
    x = rand(gc.num_src, 64, seed=19)
    with torch.inference_mode():
        for backend in BACKENDS:
            for reduce in ("sum", "max"):
                poison()
                out = graphfuse.aggregate(gg, x.to(CUDA, torch.float32), reduce=reduce, backend=backend)
                check(out, reference(gc, x, None, reduce, None, False)[0], what=f"inference {backend}/{reduce}")
        graphfuse.edge_softmax(gg, torch.randn(gc.num_edges, 2, device=CUDA), backend="gespmm")
        gat_aggregate(gg, torch.randn(gc.num_src, 2, 4, device=CUDA), torch.randn(gc.num_src, 2, device=CUDA),
                      torch.randn(gc.num_dst, 2, device=CUDA), backend="fused")
    for backend in BACKENDS:
        xc = x.to(CUDA, torch.float32).requires_grad_()
        rdx, _ = run_case(gc, gg, xc, None, "max", backend)
        check(xc.grad, rdx, what=f"training {backend} grad of x")
    # edge softmax and the fused GAT aggregation against the reference, values and gradients (random upstream
    # gradients: an edge softmax's .sum() has a zero gradient whatever the forward)
    inputs = [rand(gc.num_edges, 2, seed=23), rand(gc.num_src, 2, 4, seed=24), rand(gc.num_src, 2, seed=25),
              rand(gc.num_dst, 2, seed=26)]
    grads = [rand(gc.num_edges, 2, seed=27), rand(gc.num_dst, 2, 4, seed=28)]
    sc, hc, asc, adc = (t.to(CUDA, torch.float32).requires_grad_() for t in inputs)
    sr, hr, asr, adr = (t.clone().requires_grad_() for t in inputs)
    got = [graphfuse.edge_softmax(gg, sc, backend="gespmm"), gat_aggregate(gg, hc, asc, adc, backend="fused")]
    torch.autograd.backward(got, [g.to(CUDA, torch.float32) for g in grads])
    want = [graphfuse.edge_softmax(gc, sr, backend="reference"), gat_aggregate(gc, hr, asr, adr, backend="reference")]
    torch.autograd.backward(want, grads)
    for g, w, what in ((got[0], want[0], "edge softmax"), (got[1], want[1], "GAT aggregation"),
                       (sc.grad, sr.grad, "grad of scores"), (hc.grad, hr.grad, "grad of h"),
                       (asc.grad, asr.grad, "grad of a_src"), (adc.grad, adr.grad, "grad of a_dst")):
        check(g, w, what=f"training after inference: {what}")


@gpu
def test_no_grad_on_tensors_that_require_grad_every_backend():
    """torch.no_grad() with x and w requiring grad: the no-autograd path (plans without argmax tracking)."""
    gc, gg = graphs("hub")
    x = rand(gc.num_src, 41, seed=20)
    w = rand(gc.num_edges, seed=21, low=0.5)
    for backend in BACKENDS:
        for reduce in ("sum", "mean", "max", "min"):
            poison()
            with torch.no_grad():
                out = graphfuse.aggregate(gg, x.to(CUDA, torch.float32).requires_grad_(),
                                          w.to(CUDA, torch.float32).requires_grad_(), reduce, backend=backend)
            assert not out.requires_grad
            check(out, reference(gc, x, w, reduce, None)[0], what=f"{backend}/{reduce}")


# ------------------------------------------------------------------------------------------ G/H/I: graphs, devices
@gpu
def test_int32_edge_index():
    gc = make_graph_case("hub")
    gg = graphfuse.Graph(gc.edge_index.to(CUDA, torch.int32), num_nodes=gc.num_dst)
    assert gg.edge_index.dtype == torch.int64
    x = rand(gc.num_src, 33, seed=22)
    for backend in BACKENDS:
        xc = x.to(CUDA, torch.float32).requires_grad_()
        rdx, _ = run_case(gc, gg, xc, None, OWN_REDUCE[backend], backend)
        check(xc.grad, rdx, what=f"{backend} grad of x")


@gpu
def test_graphs_moved_between_devices_keep_correct_caches():
    """A CPU graph with cached formats and a cached GCN normalisation moved to CUDA; a CUDA graph whose kernel
    caches (int32 indices, permuted weights) were built, moved to CPU and back, with its weights changed in
    place on the CPU copy in between."""
    gc, _ = graphs("hub")
    gc.edge_weight = rand(gc.num_edges, seed=23, low=0.5).float()
    norm_cpu = process_gcn(gc, backend="reference")
    _ = gc.csr, gc.csc, gc.csr_to_csc
    gg = gc.to(CUDA)
    x = rand(gc.num_src, 16, seed=24)
    for backend in BACKENDS:
        out = graphfuse.aggregate(process_gcn(gg), x.to(CUDA, torch.float32), backend=backend)
        check(out, graphfuse.aggregate(norm_cpu, x, norm_cpu.edge_weight.double(), backend="reference"),
              what=f"moved, {backend}")
        graphfuse.aggregate(gg, x.to(CUDA, torch.float32), reduce="max", backend=backend)  # builds kernel caches
    back = gg.to("cpu")
    back.edge_weight.mul_(3.0)  # in place on the CPU copy: the caches it carries must follow
    again = back.to(CUDA)
    for backend in BACKENDS:
        out = graphfuse.aggregate(again, x.to(CUDA, torch.float32), reduce="sum", backend=backend)
        check(out, graphfuse.aggregate(back, x, back.edge_weight.double(), "sum", backend="reference"),
              what=f"round trip, {backend}")


def _cpu_input_calls(gg, n_src, n_dst, e):
    xc = torch.randn(n_src, 16)
    nn = graphfuse.nn
    return {
        "aggregate_x": lambda: graphfuse.aggregate(gg, xc),
        "aggregate_w": lambda: graphfuse.aggregate(gg, xc.to(CUDA), torch.rand(e)),
        "sddmm": lambda: graphfuse.sddmm(gg, torch.randn(n_dst, 16, device=CUDA), xc),
        "edge_softmax": lambda: graphfuse.edge_softmax(gg, torch.randn(e)),
        "gat_aggregate": lambda: gat_aggregate(gg, torch.randn(n_src, 2, 8), torch.randn(n_src, 2, device=CUDA),
                                               torch.randn(n_dst, 2, device=CUDA)),
        "gcn_layer": lambda: nn.GCNConv(16, 4).cuda()(xc, gg),
        "gat_layer": lambda: nn.GATConv(16, 4).cuda()(xc, gg),
        "sage_layer": lambda: nn.SAGEConv(16, 4).cuda()(xc, gg),
    }


@gpu
@pytest.mark.parametrize("op", ["aggregate_x", "aggregate_w", "sddmm", "edge_softmax", "gat_aggregate", "gcn_layer",
                                "gat_layer", "sage_layer"])
def test_cpu_inputs_with_a_cuda_graph_raise_a_clear_error(op):
    """CPU tensors with a CUDA graph: a ValueError/TypeError that names the device mismatch, never a CUDA
    illegal address, a CuPy error or a silent copy (each layer before its linear transform could raise torch's
    own device error)."""
    gc, gg = graphs("unsorted")
    call = _cpu_input_calls(gg, gc.num_src, gc.num_dst, gc.num_edges)[op]
    match = r"x is on cpu but the graph is on cuda" if op.endswith("_layer") else r"(?i)cpu|device"
    with pytest.raises((ValueError, TypeError), match=match):
        call()
    torch.cuda.synchronize()  # no asynchronous error left behind


# ------------------------------------------------------------------------------------------ J: streams
def _on_a_side_stream_while_the_default_is_busy(step, graph):
    """``step(graph)`` on a side stream while PyTorch's default stream is kept busy (2e9 cycles, about a second), so
    that a launch that wrongly went to the default stream lands after the side stream's reads: the default stream
    must still be busy once the results were read. A warm-up step on a fresh graph with the same edges, on the side
    stream, compiles the kernels (compiling would use up the wait) and leaves that stream cached blocks (a cudaMalloc
    during the wait might sync the device)."""
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        step(graphfuse.Graph(graph.edge_index, num_src=graph.num_src, num_dst=graph.num_dst))
    torch.cuda.synchronize()
    with torch.cuda.stream(torch.cuda.default_stream()):
        torch.cuda._sleep(2_000_000_000)
    with torch.cuda.stream(side):
        result = step(graph)
    assert not torch.cuda.default_stream().query(), "the default stream went idle before the results were read"
    torch.cuda.synchronize()
    return result


@gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_side_stream_forward_and_backward(backend):
    """Everything on a non-default stream, on a fresh graph (formats, plans, schedules, workspaces all built
    there) while the default stream is busy; results read on that stream only."""
    gc, gg = graphs("hub")
    x = rand(gc.num_src, 64, seed=25)
    w = rand(gc.num_edges, seed=26, low=0.5)
    grad = rand(gc.num_dst, 64, seed=27)

    def step(graph):
        results = {}
        for reduce in ("sum", "max"):
            xc = x.to(CUDA, torch.float32).requires_grad_()
            wc = w.to(CUDA, torch.float32).requires_grad_()
            out = graphfuse.aggregate(graph, xc, wc, reduce, backend=backend)
            out.backward(grad.to(CUDA, torch.float32))
            results[reduce] = [t.cpu() for t in (out.detach(), xc.grad, wc.grad)]  # syncs the current stream only
        return results

    for reduce, (out, dx, dw) in _on_a_side_stream_while_the_default_is_busy(step, gg).items():
        ref, rdx, rdw = reference(gc, x, w, reduce, grad)
        check(out, ref, what=f"{reduce} output")
        check(dx, rdx, what=f"{reduce} grad of x")
        check(dw, rdw, what=f"{reduce} grad of w")


@gpu
def test_side_stream_attention_sddmm_and_softmax():
    gc, gg = graphs("hub")
    h = rand(gc.num_src, 2, 8, seed=28)
    a_s, a_d = rand(gc.num_src, 2, seed=29), rand(gc.num_dst, 2, seed=30)

    def step(graph):
        hc, ac = h.to(CUDA, torch.float32).requires_grad_(), a_s.to(CUDA, torch.float32).requires_grad_()
        out = gat_aggregate(graph, hc, ac, a_d.to(CUDA, torch.float32), backend="fused")
        out.sum().backward()
        s = graphfuse.sddmm(graph, torch.ones(gc.num_dst, 2, 8, device=CUDA), hc.detach(), backend="gespmm")
        soft = graphfuse.edge_softmax(graph, s, backend="gespmm")
        return [t.cpu() for t in (out.detach(), hc.grad, ac.grad, s, soft)]

    got = _on_a_side_stream_while_the_default_is_busy(step, gg)
    hr, ar = h.clone().requires_grad_(), a_s.clone().requires_grad_()
    ref = gat_aggregate(gc, hr, ar, a_d, backend="reference")
    ref.sum().backward()
    s_ref = graphfuse.sddmm(gc, torch.ones(gc.num_dst, 2, 8, dtype=torch.float64), h, backend="reference")
    for g, r, what in zip(got, (ref, hr.grad, ar.grad, s_ref, graphfuse.edge_softmax(gc, s_ref, backend="reference")),
                          ("gat out", "gat grad h", "gat grad a_src", "sddmm", "edge_softmax")):
        check(g, r, what=what)


# ------------------------------------------------------------------------------------------ L/M/N: sizes
@gpu
@pytest.mark.parametrize("backend, k", [(b, 4096) for b in BACKENDS] + [("gespmm", 4099), ("gar", 4099)])
def test_very_wide_features(backend, k):
    """K = 4096 (32 GE-SpMM column tiles, 16 GAR tiles) and an odd K = 4099 (scalar loads, partial last tile):
    max and the backend's own reduce, gradients included."""
    gc, gg = graphs("hub")
    x = rand(gc.num_src, k, seed=31)
    w = rand(gc.num_edges, seed=32, low=0.5)
    for reduce in dict.fromkeys((OWN_REDUCE[backend], "max")):
        xc = x.to(CUDA, torch.float32).requires_grad_()
        wc = w.to(CUDA, torch.float32).requires_grad_()
        rdx, rdw = run_case(gc, gg, xc, wc, reduce, backend)
        check(xc.grad, rdx, what=f"{reduce} grad of x")
        check(wc.grad, rdw, what=f"{reduce} grad of w")


@gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_width_features(backend):
    """K = 0 (2-D and (N, H, 0)): empty outputs, an empty x gradient and a zero weight gradient."""
    gc, gg = graphs("hub")
    for reduce in ("sum", "mean", "max"):
        for shape, wshape in (((gc.num_src, 0), (gc.num_edges,)), ((gc.num_src, 2, 0), (gc.num_edges, 2))):
            x = torch.zeros(shape, device=CUDA, requires_grad=True)
            w = (torch.rand(wshape, device=CUDA) + 0.5).requires_grad_()
            out = graphfuse.aggregate(gg, x, w, reduce, backend=backend)
            assert out.shape == (gc.num_dst, *shape[1:])
            out.sum().backward()
            assert x.grad is not None and x.grad.shape == x.shape
            assert w.grad is not None and torch.equal(w.grad, torch.zeros_like(w)), "weight gradient not zeroed"


@gpu
def test_zero_width_sddmm_and_attention():
    gc, gg = graphs("hub")
    a = torch.zeros(gc.num_dst, 0, device=CUDA, requires_grad=True)
    b = torch.zeros(gc.num_src, 0, device=CUDA, requires_grad=True)
    out = graphfuse.sddmm(gg, a, b, backend="gespmm")
    assert torch.equal(out, torch.zeros(gc.num_edges, device=CUDA))
    out.sum().backward()
    h = torch.zeros(gc.num_src, 2, 0, device=CUDA, requires_grad=True)
    a_s = torch.randn(gc.num_src, 2, device=CUDA, requires_grad=True)
    out = gat_aggregate(gg, h, a_s, torch.randn(gc.num_dst, 2, device=CUDA), backend="fused")
    assert out.shape == (gc.num_dst, 2, 0)
    out.sum().backward()
    assert torch.equal(a_s.grad, torch.zeros_like(a_s))


@gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_nodes(backend):
    """A graph of no nodes and no edges, and blocks with no sources or no targets, 2-D and 3-D features.
    Found by review (autograd.BoundAggregate.__call__ / _flatten): 3-D x with 0 rows is flattened by
    x.reshape(0, -1), which torch refuses ("cannot reshape tensor of 0 elements ... ambiguous")."""
    for sizes in ({"num_nodes": 0}, {"num_src": 0, "num_dst": 5}, {"num_src": 5, "num_dst": 0}):
        gc = graphfuse.Graph(torch.empty(2, 0, dtype=torch.long), **sizes)
        gg = gc.to(CUDA)
        for reduce in ("sum", "mean", "max"):
            x = torch.randn(gc.num_src, 8, device=CUDA, requires_grad=True)
            w = torch.rand(0, device=CUDA, requires_grad=True)
            out = graphfuse.aggregate(gg, x, w, reduce, backend=backend)
            check(out, torch.zeros(gc.num_dst, 8, dtype=torch.float64), what=f"{sizes} {reduce}")
            out.sum().backward()
            check(x.grad, torch.zeros(gc.num_src, 8, dtype=torch.float64), what=f"{sizes} {reduce} grad")
            x3 = torch.randn(gc.num_src, 2, 4, device=CUDA)  # found by review: x.reshape(0, -1) is ambiguous
            out3 = graphfuse.aggregate(gg, x3, torch.rand(0, 2, device=CUDA), reduce, backend=backend)
            check(out3, torch.zeros(gc.num_dst, 2, 4, dtype=torch.float64), what=f"{sizes} {reduce} 3-D")


@gpu
def test_zero_nodes_sddmm_softmax_attention():
    """Found by review (autograd.sddmm: a.reshape(a.size(0), -1); attention.gat_aggregate: h.reshape(...)): with
    no targets (or no nodes) the flattening raises torch's "cannot reshape tensor of 0 elements" error, 2-D
    operands included; the reference returns empty results."""
    block = graphfuse.Graph(torch.empty(2, 0, dtype=torch.long, device=CUDA), num_src=5, num_dst=0)
    assert graphfuse.sddmm(block, torch.randn(0, 8, device=CUDA), torch.randn(5, 8, device=CUDA),
                           backend="gespmm").shape == (0,)
    gg = graphfuse.Graph(torch.empty(2, 0, dtype=torch.long, device=CUDA), num_nodes=0)
    a = torch.randn(0, 2, 4, device=CUDA, requires_grad=True)
    assert graphfuse.sddmm(gg, a, a, backend="gespmm").shape == (0, 2)
    assert graphfuse.edge_softmax(gg, torch.randn(0, 2, device=CUDA), backend="gespmm").shape == (0, 2)
    a_s = torch.randn(0, 2, device=CUDA, requires_grad=True)
    assert gat_scores(a, torch.randn(2, 4, device=CUDA), torch.randn(2, 4, device=CUDA))[0].shape == (0, 2)
    assert gat_attention(gg, a_s, a_s, backend="fused").shape == (0, 2)
    out = gat_aggregate(gg, a, a_s, a_s, backend="fused")
    assert out.shape == (0, 2, 4)
    out.sum().backward()


@gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_mean_max_min_into_isolated_targets_and_sourceless_blocks(backend):
    """Targets without in-edges get 0 (and no gradient) for every reduce, also in a block with more targets
    than sources whose extra targets have no edges."""
    gc0 = make_graph_case("isolated")
    ei = gc0.edge_index
    for gc in (gc0, graphfuse.Graph(ei, num_src=6, num_dst=40)):
        gg = graphfuse.Graph(gc.edge_index.to(CUDA), num_src=gc.num_src, num_dst=gc.num_dst)
        for reduce in ("mean", "max", "min"):
            x = rand(gc.num_src, 7, seed=33).to(CUDA, torch.float32).requires_grad_()
            w = rand(gc.num_edges, seed=34, low=0.5).to(CUDA, torch.float32).requires_grad_()
            rdx, rdw = run_case(gc, gg, x, w, reduce, backend)
            check(x.grad, rdx, what=f"{reduce} grad of x")
            check(w.grad, rdw, what=f"{reduce} grad of w")


# ------------------------------------------------------------------------------------------ O/S: dtypes
@gpu
@pytest.mark.parametrize("heads", [None, 3])
def test_sddmm_and_edge_softmax_gradients_float64(heads):
    """Values and gradients of the kernel backends' sddmm and edge_softmax against the reference in float64
    (the existing GPU suite compares their values only, and gradchecks sddmm without edge weights)."""
    gc, gg = graphs("hub")
    shape = (16,) if heads is None else (heads, 5)
    a, b = rand(gc.num_dst, *shape, seed=35), rand(gc.num_src, *shape, seed=36)
    w = rand(gc.num_edges, seed=37, low=0.5)
    for backend in ("gespmm",):  # every kernel backend registers the same sddmm and edge_softmax
        ac, bc, wc = (t.to(CUDA).requires_grad_() for t in (a, b, w))
        ar, br, wr = (t.clone().requires_grad_() for t in (a, b, w))
        s = graphfuse.sddmm(gg, ac, bc, wc, backend=backend)
        sr = graphfuse.sddmm(gc, ar, br, wr, backend="reference")
        soft = graphfuse.edge_softmax(gg, s, backend=backend)
        softr = graphfuse.edge_softmax(gc, sr, backend="reference")
        g = rand(*softr.shape, seed=38)
        (soft * g.to(CUDA)).sum().backward()
        (softr * g).sum().backward()
        for got, want, what in ((s, sr, "sddmm"), (soft, softr, "softmax"), (ac.grad, ar.grad, "grad a"),
                                (bc.grad, br.grad, "grad b"), (wc.grad, wr.grad, "grad w")):
            check(got, want, torch.float64, f"{backend} {what}")


@gpu
def test_sddmm_of_a_tensor_with_itself():
    """sddmm(g, x, x): both gradients flow into the one tensor."""
    gc, gg = graphs("hub")
    x = rand(gc.num_src, 2, 6, seed=39)
    xc, xr = x.to(CUDA).requires_grad_(), x.clone().requires_grad_()
    graphfuse.sddmm(gg, xc, xc, backend="gespmm").pow(2).sum().backward()
    graphfuse.sddmm(gc, xr, xr, backend="reference").pow(2).sum().backward()
    check(xc.grad, xr.grad, torch.float64, "grad of x")


@gpu
def test_float64_weights_with_float32_features_every_backend():
    """Weights of another dtype are cast per call (never the graph's cached permutation); the weight gradient
    comes back in the weights' dtype."""
    gc, gg = graphs("hub")
    x = rand(gc.num_src, 24, seed=40)
    w = rand(gc.num_edges, seed=41, low=0.5)
    for backend in BACKENDS:
        for reduce in ("sum", "max"):
            xc = x.to(CUDA, torch.float32).requires_grad_()
            wc = w.to(CUDA, torch.float64).requires_grad_()
            rdx, rdw = run_case(gc, gg, xc, wc, reduce, backend)
            assert wc.grad.dtype == torch.float64
            check(xc.grad, rdx, what=f"{backend}/{reduce} grad of x")
            check(wc.grad, rdw, what=f"{backend}/{reduce} grad of w")


@gpu
def test_autocast(monkeypatch):
    """Under autocast(float16): float32 features still go to the kernels (result float32); float16 features
    under "auto" take GE-SpMM (the result equals backend="gespmm"'s, bitwise, and the reference's to float16
    rounding); the other kernel backends refuse float16 with a TypeError; the layers give the float32 layer's output
    and input gradient to float16's rounding. Only GCNConv(normalize=False) aggregates float16 features (the
    autocast Linear's; normalised GCN and GAT sum in float32, SAGE aggregates its float32 input)."""
    gc, gg = graphs("hub")
    x = rand(gc.num_src, 16, seed=42)
    with torch.autocast("cuda", dtype=torch.float16):
        for backend in BACKENDS:
            out = graphfuse.aggregate(gg, x.to(CUDA, torch.float32), reduce="mean", backend=backend)
            assert out.dtype == torch.float32
            check(out, reference(gc, x, None, "mean", None, False)[0], what=backend)
        xh = x.to(CUDA, torch.float16)
        half = graphfuse.aggregate(gg, xh, reduce="max")
        assert half.dtype == torch.float16
        assert torch.equal(half, graphfuse.aggregate(gg, xh, reduce="max", backend="gespmm"))
        check(half.double(), reference(gc, xh.double().cpu(), None, "max", None, False)[0], what="float16 max")
        for backend in ("gar", "gas", "hpspmm"):
            with pytest.raises(TypeError, match=f"backend '{backend}' supports float32 and float64 features"):
                graphfuse.aggregate(gg, xh, backend=backend)
    torch.manual_seed(0)
    dtypes = []  # of the features each aggregation of the layers gets
    resolve = dispatcher.resolve_cached
    monkeypatch.setattr(dispatcher, "resolve_cached",
                        lambda *args, **kw: dtypes.append(kw["x"].dtype) or resolve(*args, **kw))
    # (layer, whether its aggregation gets float16 features under autocast); SAGEConv's `normalize` is its output's
    # L2 norm, so the flag is spelled out rather than read from the layer (GATConv on CUDA takes the fused attention
    # path, not the dispatcher)
    for layer, aggregates_half in ((graphfuse.nn.GCNConv(16, 8), False),
                                   (graphfuse.nn.GCNConv(16, 8, normalize=False, backend="gespmm"), True),
                                   (graphfuse.nn.SAGEConv(16, 8, aggr="max"), False),
                                   (graphfuse.nn.SAGEConv(16, 8, backend="gespmm"), False),
                                   (graphfuse.nn.GATConv(16, 4, heads=2), False)):
        layer.cuda()
        # the same layer in float32 without autocast: output and input gradient within float16's rounding
        outs, grads = [], []
        for cast in (True, False):
            xc = x.to(CUDA, torch.float32).requires_grad_()
            dtypes.clear()
            with torch.autocast("cuda", dtype=torch.float16, enabled=cast):
                out = layer(xc, gg)
            assert (torch.float16 in dtypes) == (cast and aggregates_half), (type(layer).__name__, cast, dtypes)
            out.float().backward(torch.linspace(-1, 1, out.numel(), device=CUDA).view(out.shape))
            outs.append(out.float().detach())
            grads.append(xc.grad)
        assert not torch.equal(*outs), f"{type(layer).__name__}: autocast changed nothing"
        for what, got, want in (("output", *outs), ("input gradient", *grads)):
            scale = 1.0 + want.abs().max().item()
            torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2 * scale,
                                       msg=lambda m, what=what, layer=layer: f"{type(layer).__name__} {what}: {m}")


# ------------------------------------------------------------------------------------------ P: weights changed
@gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_weights_changed_in_place_or_replaced_with_gradients(backend):
    """The graph's own learned weights: cached permuted copies (CSR for the forward, CSC for the backward) must
    follow an optimizer-style in-place update and a replacement, in the gradient path too."""
    gc, gg = graphs("hub")
    w0 = rand(gc.num_edges, seed=43, low=0.5)
    param = torch.nn.Parameter(w0.to(CUDA, torch.float32))
    gg.edge_weight = param
    x = rand(gc.num_src, 32, seed=44)
    reduce = OWN_REDUCE[backend]
    for step in range(3):
        xc = x.to(CUDA, torch.float32).requires_grad_()
        out = graphfuse.aggregate(gg, xc, reduce=reduce, backend=backend)
        grad = rand(*out.shape, seed=45 + step)
        out.backward(grad.to(CUDA, torch.float32))
        ref, rdx, rdw = reference(gc, x, param.detach(), reduce, grad)
        check(out, ref, what=f"step {step} output")
        check(xc.grad, rdx, what=f"step {step} grad of x")
        check(param.grad, rdw, what=f"step {step} grad of w")
        with torch.no_grad():
            param.mul_(1.5).add_(param.grad, alpha=-0.1)  # in place, as an optimizer step
        param.grad = None
    gg.edge_weight = torch.nn.Parameter(torch.rand(gc.num_edges, device=CUDA) + 0.5)  # replaced
    xc = x.to(CUDA, torch.float32).requires_grad_()
    rdx, rdw = run_case(gc, gg, xc, gg.edge_weight, reduce, backend)
    check(gg.edge_weight.grad, rdw, what="replaced weights' gradient")


@gpu
def test_fused_stage_weights_changed_in_place():
    """The fused processing stage pre-fills the permuted-weight caches (graph_stage._seed_permuted) with rows of
    the same buffer as the processed graph's weights: after an in-place change of those weights, and of the
    original graph's weights (process_gcn's cached result), aggregation must use the new values."""
    gc, gg = graphs("hub")
    w = rand(gc.num_edges, seed=50, low=0.5)
    gg.edge_weight = w.to(CUDA, torch.float32)
    x = rand(gc.num_src, 16, seed=51)
    for backend in BACKENDS:
        norm = process_gcn(gg)
        graphfuse.aggregate(norm, x.to(CUDA, torch.float32), backend=backend)  # uses the seeded caches
        norm.edge_weight.mul_(2.0)
        out = graphfuse.aggregate(norm, x.to(CUDA, torch.float32), backend=backend)
        check(out, graphfuse.aggregate(norm.to("cpu"), x, norm.edge_weight.cpu().double(), backend="reference"),
              what=f"{backend} after in-place change of the processed weights")
    gg.edge_weight.mul_(0.25)  # the original graph's weights: process_gcn must rebuild
    gc.edge_weight = gg.edge_weight.cpu().double()
    ref_norm = process_gcn(gc, backend="reference")
    out = graphfuse.aggregate(process_gcn(gg), x.to(CUDA, torch.float32), backend="gespmm")
    check(out, graphfuse.aggregate(ref_norm, x, backend="reference"), what="after in-place change of the input")


# ------------------------------------------------------------------------------------------ K: CUDA graphs
@gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_captured_aggregation_after_warmup_replays_with_new_inputs(backend):
    """Forward aggregation captured into a CUDA graph after warm-up (torch's recipe), replayed with new features
    and new per-call weights copied into the static inputs."""
    gc, gg = graphs("hub")
    reduce = OWN_REDUCE[backend]
    sx = torch.zeros(gc.num_src, 64, device=CUDA)
    sw = torch.ones(gc.num_edges, device=CUDA)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(2):
            graphfuse.aggregate(gg, sx, sw, reduce, backend=backend)
    torch.cuda.current_stream().wait_stream(side)
    cg = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(cg):
        static_out = graphfuse.aggregate(gg, sx, sw, reduce, backend=backend)
    for seed in (52, 53):
        x, w = rand(gc.num_src, 64, seed=seed), rand(gc.num_edges, seed=seed + 10, low=0.5)
        sx.copy_(x.to(CUDA, torch.float32))
        sw.copy_(w.to(CUDA, torch.float32))
        static_out.fill_(float("nan"))  # in the graph's private pool, which poison() does not reach
        cg.replay()
        torch.cuda.synchronize()
        check(static_out, reference(gc, x, w, reduce, None, False, False)[0], what=f"replay {seed}")


@gpu
def test_captured_gat_dropout_is_refused_by_the_fused_kernels_and_redrawn_by_the_reference():
    """Found by review (attention._seed): the fused GAT's dropout seed is a Python int drawn on the host at call
    time, so a captured training step baked one seed into the graph and every replay dropped the same edges. The
    fused kernels now refuse capture with dropout; the reference (F.dropout) draws a new mask at each replay."""
    gc, gg = graphs("hub")
    a_s = torch.randn(gc.num_src, 2, device=CUDA)
    a_d = torch.randn(gc.num_dst, 2, device=CUDA)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up: formats built, kernels compiled
        for backend in ("fused", "reference"):
            gat_attention(gg, a_s, a_d, dropout=0.5, training=True, backend=backend)
    torch.cuda.current_stream().wait_stream(side)
    with pytest.raises(RuntimeError, match="a CUDA graph would replay one mask at every step"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            gat_attention(gg, a_s, a_d, dropout=0.5, training=True, backend="fused")
    cg = torch.cuda.CUDAGraph()
    with torch.cuda.graph(cg):
        alpha = gat_attention(gg, a_s, a_d, dropout=0.5, training=True, backend="reference")
    masks = []
    for _ in range(2):
        cg.replay()
        torch.cuda.synchronize()
        masks.append(alpha == 0)
    assert masks[0].float().mean().item() > 0.3
    assert not torch.equal(masks[0], masks[1]), "every replay drops the same edges"


@gpu
@pytest.mark.parametrize("backend", ["gespmm", "gar", "hpspmm", "gas"])
def test_capture_as_the_first_use_of_a_graph(backend):
    """Found by review (Graph.cached: the CSR, int32 indices and permuted weights built lazily): a graph whose
    first aggregation was captured built them inside the capture, where their kernels only run at replay (an eager
    call before a replay read unwritten memory), or failed with CUDA's or torch's capture errors (builds that sync).
    Now a clear error asks for a warm-up; after one, the captured call replays the reference's result."""
    gc, _ = graphs("hub")
    reduce = "mean" if backend == "gas" else "sum"
    x = rand(gc.num_src, 32, seed=54).to(CUDA, torch.float32)
    w = rand(gc.num_edges, seed=55, low=0.5).to(CUDA, torch.float32)
    warm = graphfuse.Graph(gc.edge_index.to(CUDA), num_nodes=gc.num_dst)
    graphfuse.aggregate(warm, x, w, reduce, backend=backend)  # compiles the kernels
    gg = graphfuse.Graph(gc.edge_index.to(CUDA), num_nodes=gc.num_dst, edge_weight=w.clone())
    torch.cuda.synchronize()
    with pytest.raises(RuntimeError, match="would be built during CUDA graph capture; call the op once"):
        with torch.no_grad(), torch.cuda.graph(torch.cuda.CUDAGraph()):
            graphfuse.aggregate(gg, x, reduce=reduce, backend=backend)
    want = reference(gc, x, w, reduce, None, False, False)[0]
    check(graphfuse.aggregate(gg, x, reduce=reduce, backend=backend), want, what="eager warm-up")
    torch.cuda.synchronize()
    cg = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(cg):
        static_out = graphfuse.aggregate(gg, x, reduce=reduce, backend=backend)
    static_out.fill_(float("nan"))  # in the graph's private pool, which poison() does not reach
    cg.replay()
    torch.cuda.synchronize()
    check(static_out, want, what="replay")
