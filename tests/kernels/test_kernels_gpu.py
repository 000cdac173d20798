"""GPU suite of the kernel backends: every backend × reduce × K × graph case against the float64 reference,
outputs poisoned with NaN before the kernels run, gradients included; gradcheck in float64; bitwise
determinism of gespmm and gar; sddmm, edge softmax, the launchers' extras and the layers on each backend."""

from __future__ import annotations

import copy
import functools
import sys
import threading

import pytest
import torch

import graphfuse
from cases import (
    GRAPH_CASES,
    TOLERANCES,
    length_class,
    make_big_hub,
    make_graph_case,
    poison,
    poison_next,
    torch_row_schedule,
)
from graphfuse.engine import autograd, reference
from graphfuse.kernels import es_spmm as es_kernels
from graphfuse.kernels import gas as gas_kernels
from graphfuse.kernels import hp_spmm as hp_spmm_kernels
from graphfuse.kernels import sddmm as sddmm_kernels
from graphfuse.kernels import spmm as spmm_kernels

pytestmark = pytest.mark.gpu

BACKENDS = ["gespmm", "gar", "gas", "hpspmm"]
REDUCES = ["sum", "mean", "max", "min"]
# hpspmm hands max/min and per-head weights to GE-SpMM: its own kernel runs for sum and mean
PAIRS = [(b, r) for b in BACKENDS for r in REDUCES if not (b == "hpspmm" and r in ("max", "min"))]
KS = [1, 7, 16, 32, 41, 64, 100, 128, 256, 602]
CASES = GRAPH_CASES + ["big_hub"]


@functools.cache
def graph(case: str) -> graphfuse.Graph:
    if case == "big_hub":
        g = make_big_hub()
    else:
        g = make_graph_case(case)
    return g.to("cuda")


def fold_split_rows(monkeypatch: pytest.MonkeyPatch, in_kernel: bool) -> None:
    """GE-SpMM plans built from here on fold split rows in the row kernel (``in_kernel``) or by gespmm_combine,
    whatever their number of partials."""
    monkeypatch.setattr(spmm_kernels, "FOLD_MAX_PARTIALS", 1 << 40 if in_kernel else 0)


@pytest.fixture(autouse=True)
def poison_allocator():
    """Outputs start as NaN (float32 NaN; the half-precision tests poison for their own dtypes)."""
    poison()
    yield


def assert_close(out: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | None = None) -> None:
    """|out - ref| <= atol + rtol * scale (scale = |ref|, or the sum of |terms| for sums: the error bound of a
    floating-point summation), with the tolerances of tests/cases.py for out's dtype. NaN never passes."""
    assert out.shape == ref.shape, f"shape {tuple(out.shape)}, reference {tuple(ref.shape)}"  # no broadcasting
    tol = TOLERANCES[out.dtype]
    out64 = out.double()
    assert torch.isfinite(out64).all(), "output holds NaN/inf (an element was not written?)"
    bound = tol["atol"] + tol["rtol"] * (ref.abs() if scale is None else scale)
    err = (out64 - ref).abs()
    worst = (err - bound).max() if err.numel() else torch.tensor(-1.0)
    assert bool((err <= bound).all()), f"max error {err.max():.3e}, worst excess {worst:.3e}"


def inputs(g, k, dtype, weighted, heads=None, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shape = (g.num_src, k) if heads is None else (g.num_src, heads, k // heads)
    x = torch.randn(shape, generator=gen, device="cuda", dtype=dtype)
    w = None
    if weighted:
        wshape = (g.num_edges,) if heads is None else (g.num_edges, heads)
        w = torch.rand(wshape, generator=gen, device="cuda", dtype=dtype) + 0.5
    return x, w


def run_and_compare(backend, g, x, w, reduce):
    x = x.clone().requires_grad_(True)
    w = None if w is None else w.clone().requires_grad_(True)
    out = graphfuse.aggregate(g, x, w, reduce, backend=backend)
    x64 = x.detach().double()
    w64 = None if w is None else w.detach().double()
    gen = torch.Generator(device="cuda").manual_seed(7)
    grad = torch.randn(out.shape, generator=gen, device="cuda", dtype=out.dtype)
    out.backward(grad)
    ref, ref_dx, ref_dw = reference_with_grads(g, x64, w64, reduce, grad.double(), x.dtype)
    absw = None if w64 is None else w64.abs()
    scale = reference.aggregate(g, x64.abs(), absw, reduce) if reduce in ("sum", "mean") else ref.abs()
    assert_close(out, ref, scale)
    if out.dtype in HALF_DTYPES and reduce in ("sum", "mean"):
        assert_summed_in_float32(out.detach(), ref, scale)
    # gradient scales: sums of |terms| over the transpose and over the features
    assert_close(x.grad, ref_dx, _grad_x_scale(g, w64, grad, reduce))
    if w is not None:
        assert_close(w.grad, ref_dw, _grad_w_scale(g, x64, grad, reduce, w64.shape))


def reference_with_grads(g, x64, w64, reduce, grad64, dtype=torch.float64):
    """Float64 reference output and gradients. Sum/mean: autograd through the reference backend. Max/min: the
    documented semantics, where among tied messages the first entry in CSR order takes the whole gradient
    (torch's scatter_reduce splits it evenly instead; duplicate edges make exact ties). The winners are picked
    among the messages as the kernels compute them, in the accumulator type of features of ``dtype`` (float32
    for float32 and half features: one rounding per weighted product): in float64, two products closer than that
    rounding could order the other way, and the whole gradient would go to another source while the outputs
    agree. On the 600,000-entry skewed graph that happens about once in 15 million (row, column) pairs for max and
    for min (counted on the CPU over 768 columns of random features and weights), about once per test there."""
    xr = x64.clone().requires_grad_(True)
    wr = None if w64 is None else w64.clone().requires_grad_(True)
    ref = reference.aggregate(g, xr, wr, reduce)
    if reduce in ("sum", "mean"):
        ref.backward(grad64)
        return ref.detach(), xr.grad, (None if wr is None else wr.grad)
    ref = ref.detach()
    src, dst = g.edge_index
    xs = x64.index_select(0, src)
    wb = None if w64 is None else w64.view(*w64.shape, *([1] * (x64.dim() - w64.dim())))
    acc = torch.promote_types(dtype, torch.float32)
    msg = xs.to(acc) if wb is None else xs.to(acc) * wb.to(acc)
    index = dst.view(-1, *([1] * (msg.dim() - 1))).expand_as(msg)
    best = torch.full_like(ref, float("nan"), dtype=acc).scatter_reduce(0, index, msg, "amax" if reduce == "max"
                                                                        else "amin", include_self=False)
    hit = msg == best.index_select(0, dst)
    pos = torch.empty_like(g.csr.perm)
    pos[g.csr.perm] = torch.arange(g.num_edges, device=pos.device)
    big = torch.iinfo(torch.int64).max
    score = torch.where(hit, pos.view(-1, *([1] * (msg.dim() - 1))).expand_as(msg), big)
    first = torch.full_like(ref, big, dtype=torch.int64).scatter_reduce(0, index, score, "amin", include_self=True)
    win = hit & (score == first.index_select(0, dst))
    gsel = torch.where(win, grad64.index_select(0, dst), 0.0)
    dx = torch.zeros_like(x64).index_add(0, src, gsel if wb is None else gsel * wb)
    dw = None
    if w64 is not None:
        prod = gsel * xs
        dw = prod.flatten(1).sum(-1) if w64.dim() == 1 else prod.sum(-1)
    return ref, dx, dw


def _grad_x_scale(g, w64, grad, reduce):
    gt = graphfuse.Graph(g.edge_index.flip(0), num_src=g.num_dst, num_dst=g.num_src)
    ga = grad.double().abs()
    if reduce == "mean":
        ga = ga / g.in_degree.clamp(min=1).double().view(-1, *([1] * (ga.dim() - 1)))
    return reference.aggregate(gt, ga, None if w64 is None else w64.abs(), "sum")


def _grad_w_scale(g, x64, grad, reduce, wshape):
    src, dst = g.edge_index
    ga = grad.double().abs()
    if reduce == "mean":
        ga = ga / g.in_degree.clamp(min=1).double().view(-1, *([1] * (ga.dim() - 1)))
    prod = ga.index_select(0, dst) * x64.abs().index_select(0, src)
    return prod.flatten(1).sum(-1) if len(wshape) == 1 else prod.sum(-1)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("backend, reduce", PAIRS)
def test_aggregate_matches_reference(backend, reduce, k, case):
    g = graph(case)
    weighted = (k + len(case)) % 3 != 0  # most combinations weighted, some unweighted
    x, w = inputs(g, k, torch.float32, weighted)
    run_and_compare(backend, g, x, w, reduce)


@pytest.mark.parametrize("k", [7, 64, 256])
@pytest.mark.parametrize("backend, reduce", PAIRS)
def test_aggregate_into_more_targets_than_sources(backend, reduce, k):
    """A block of 12 sources and 30 targets (the bipartite case turned round: SAGEConv's (x_src, x_dst) pairs and
    GCNConv(normalize=False) send such blocks), forward and gradients; some targets have no in-edge."""
    g = graph("bipartite")
    g = graphfuse.Graph(g.edge_index.flip(0), num_src=g.num_dst, num_dst=g.num_src)
    x, w = inputs(g, k, torch.float32, k != 64)
    run_and_compare(backend, g, x, w, reduce)


@pytest.mark.parametrize("case", ["unsorted", "hub", "bipartite", "big_hub", "no_edges"])
@pytest.mark.parametrize("heads, k", [(1, 5), (1, 64), (2, 2), (4, 28), (2, 82), (8, 64), (3, 606)])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("backend", ["gespmm", "gar", "gas", "hpspmm"])
def test_aggregate_multihead(backend, reduce, heads, k, case):
    """heads = 1 (one-head (E, 1) weights, e.g. a GAT output layer on a named backend): GAR and GAS refused the
    2-D weights, and GE-SpMM/HP-SpMM returned (E,) weight gradients for them."""
    g = graph(case)
    x, w = inputs(g, k, torch.float32, True, heads=heads)
    run_and_compare(backend, g, x, w, reduce)


HALF_DTYPES = [torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("reduce", REDUCES)
def test_gespmm_half_precision_matches_reference(reduce, k, case, dtype):
    """float16/bfloat16 features (and weights) on GE-SpMM, forward and gradients, against the float64 reference
    at the dtype's tolerance; the allocator poisoned with all-ones bit patterns, a NaN in every float dtype (a
    float32 NaN reads as a 0 and a NaN in 16-bit halves)."""
    g = graph(case)
    x, w = inputs(g, k, dtype, (k + len(case)) % 3 != 0)
    poison(-1, torch.int32)
    run_and_compare("gespmm", g, x, w, reduce)
    assert graphfuse.aggregate(g, x, w, reduce).dtype == dtype  # "auto" takes GE-SpMM too, in the same dtype


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("case", ["hub", "big_hub"])
@pytest.mark.parametrize("heads, k", [(2, 2), (4, 28), (8, 64), (3, 606)])
@pytest.mark.parametrize("reduce", REDUCES)
def test_gespmm_half_precision_multihead(reduce, heads, k, case, dtype):
    g = graph(case)
    x, w = inputs(g, k, dtype, True, heads=heads)
    poison(-1, torch.int32)
    run_and_compare("gespmm", g, x, w, reduce)


def assert_summed_in_float32(out, ref, terms):
    """A 16-bit sum/mean is summed in float32 and rounded once: within the dtype's rtol of |ref| plus float32's
    of the sum of |terms|, and 1e-6 absolute (a float16 rounding in the subnormal range is under 3e-8).
    run_and_compare's general bound (the 16-bit rtol times the sum of |terms|, atol 1e-2) passes the 100,000-entry
    hub's row left at zero: its mean is ~3e-3, its bfloat16 sum within 2e-2 x 8e4 (checked on CPU with the
    reference)."""
    tol = TOLERANCES[out.dtype]
    bound = 1e-6 + tol["rtol"] * ref.abs() + TOLERANCES[torch.float32]["rtol"] * terms
    err = (out.double() - ref).abs()
    assert bool((err <= bound).all()), f"max error {err.max():.3e}, worst excess {(err - bound).max():.3e}"


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("reduce", REDUCES)
def test_gespmm_half_precision_sums_in_float32(reduce, dtype):
    """A hub of 100,000 halves: summed in half precision it would stop near 1,024 (float16) or 128 (bfloat16)."""
    g = graph("big_hub")
    x = torch.full((g.num_src, 8), 0.5, dtype=dtype, device="cuda")
    out = graphfuse.aggregate(g, x, reduce=reduce, backend="gespmm")
    ref = reference.aggregate(g, x.double(), reduce=reduce)
    assert_close(out, ref)
    assert out.float().max() == ref.max().to(dtype).float()


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_gespmm_half_precision_mean_gradient_of_a_hub(dtype):
    """The sources of a 100,000-degree hub get gradients near 1e-5, under the absolute tolerance of the tests
    above: checked relatively here (the output gradient divided by a float16 degree, inf from 65,520, had zeroed
    them)."""
    g = graph("big_hub")
    x = torch.ones(g.num_src, 8, dtype=dtype, device="cuda", requires_grad=True)
    graphfuse.aggregate(g, x, reduce="mean", backend="gespmm").backward(torch.ones(g.num_dst, 8, dtype=dtype,
                                                                                   device="cuda"))
    x64 = x.detach().double().requires_grad_(True)
    reference.aggregate(g, x64, reduce="mean").backward(torch.ones(g.num_dst, 8, dtype=torch.float64, device="cuda"))
    torch.testing.assert_close(x.grad.double(), x64.grad, rtol=TOLERANCES[dtype]["rtol"], atol=1e-7)


@pytest.mark.parametrize("case", ["unsorted", "hub", "bipartite", "duplicates", "isolated"])
@pytest.mark.parametrize("k", [1, 7, 41])
@pytest.mark.parametrize("backend, reduce", PAIRS)
def test_aggregate_float64(backend, reduce, k, case):
    g = graph(case)
    x, w = inputs(g, k, torch.float64, True)
    run_and_compare(backend, g, x, w, reduce)


@pytest.mark.parametrize("case", ["hub", "duplicates", "isolated", "big_hub"])
@pytest.mark.parametrize("k", [7, 41, 602])
@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_extremum_of_infinite_messages(backend, reduce, k, case):
    """Where every message of a row is -inf (max) / +inf (min), the result is that infinity, as in the
    reference, with or without a gradient: the kernels that track the argmax wrote 0 (no message beat the
    identity, so none was taken), the untracked ones the infinity. The gradient goes to the row's first entry."""
    g = graph(case)
    x, _ = inputs(g, k, torch.float32, False)
    inf = float("-inf") if reduce == "max" else float("inf")
    x[:, :3] = inf  # every message of these columns
    x[::2, 3:] = inf  # in the other columns, rows whose sources are all even
    with torch.no_grad():
        plain = graphfuse.aggregate(g, x, None, reduce, backend=backend)
    xg = x.clone().requires_grad_(True)
    out = graphfuse.aggregate(g, xg, None, reduce, backend=backend)
    ref = reference.aggregate(g, x.double(), None, reduce)
    assert torch.equal(plain.double(), ref) and torch.equal(out.detach().double(), ref)
    grad = torch.randn(out.shape, generator=torch.Generator(device="cuda").manual_seed(7), device="cuda")
    out.backward(grad)
    _, ref_dx, _ = reference_with_grads(g, x.double(), None, reduce, grad.double())
    assert_close(xg.grad, ref_dx)


def nan_features(g: graphfuse.Graph, k: int) -> torch.Tensor:
    """Features with NaN where a row's messages are all NaN (column 0), where some are (every third source in
    columns 1 to K/2) and where one source deep in the COO order is and the longest row's last entry (column
    K - 1: the latter inside the last segment of a split hub row)."""
    x, _ = inputs(g, k, torch.float32, False)
    x[:, 0] = float("nan")
    x[1::3, 1 : k // 2 + 1] = float("nan")
    x[g.edge_index[0, g.num_edges * 2 // 3], k - 1] = float("nan")
    last = g.csr.rowptr[int(g.csr.rowptr.diff().argmax()) + 1] - 1
    x[g.csr.col[last], k - 1] = float("nan")
    return x


def assert_same_with_nan(out: torch.Tensor, ref: torch.Tensor) -> None:
    """out equals ref bit for bit (in float64), NaN where ref is NaN and nowhere else."""
    assert torch.equal(out.double().isnan(), ref.isnan()), "NaN in other places than the reference's"
    assert torch.equal(out.double().nan_to_num(0.0), ref.nan_to_num(0.0))


@pytest.mark.parametrize("case", ["unsorted", "hub", "duplicates", "big_hub"])
@pytest.mark.parametrize("k", [7, 32, 64, 602])
@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_extremum_of_nan_messages(backend, reduce, k, case):
    """A row with a NaN message is NaN there, as in the reference (torch's amax/amin), with or without a
    gradient and wherever the NaN falls in the row: the strict comparison never took a NaN, so rows without a
    gradient kept their finite extremum (all-NaN rows: the identity, -inf for max), and rows with one were NaN
    only where the NaN came first (the same forward gave other values in training and in evaluation)."""
    g = graph(case)
    x = nan_features(g, k)
    with torch.no_grad():
        plain = graphfuse.aggregate(g, x, None, reduce, backend=backend)
    tracked = graphfuse.aggregate(g, x.clone().requires_grad_(True), None, reduce, backend=backend)
    ref = reference.aggregate(g, x.double(), None, reduce)
    assert ref.isnan().any() and not ref.isnan().all()
    assert_same_with_nan(plain, ref)
    assert_same_with_nan(tracked.detach(), ref)


@pytest.mark.parametrize("case", ["unsorted", "bipartite", "duplicates", "single_node"])
@pytest.mark.parametrize("k", [3, 33])
@pytest.mark.parametrize("backend, reduce", PAIRS)
def test_gradcheck(backend, reduce, k, case):
    g = graph(case)
    x, w = inputs(g, k, torch.float64, True, seed=3)
    x.requires_grad_(True)
    w.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: graphfuse.aggregate(g, a, b, reduce, backend=backend), (x, w),
                                    eps=1e-6, atol=1e-7, rtol=1e-5,
                                    nondet_tol=1e-12 if backend in ("gas", "hpspmm") else 0.0)


@pytest.mark.parametrize("heads", [None, 4])
@pytest.mark.parametrize("case", ["unsorted", "bipartite"])
def test_gradcheck_sddmm(case, heads):
    g = graph(case)
    k = 12
    shape_a = (g.num_dst, k) if heads is None else (g.num_dst, heads, k // heads)
    shape_b = (g.num_src, k) if heads is None else (g.num_src, heads, k // heads)
    a = torch.randn(shape_a, device="cuda", dtype=torch.float64, requires_grad=True)
    b = torch.randn(shape_b, device="cuda", dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda p, q: graphfuse.sddmm(g, p, q, backend="gespmm"), (a, b))


@functools.cache
def skewed_graph() -> graphfuse.Graph:
    gen = torch.Generator().manual_seed(5)
    n = 20_000
    src = torch.randint(0, n, (600_000,), generator=gen)
    dst = (torch.rand(600_000, generator=gen) ** 3 * n).long()  # heavy in-degree skew toward node 0
    return graphfuse.Graph(torch.stack([src, dst]), num_nodes=n).to("cuda")


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduce", REDUCES)
def test_wide_features_of_a_mid_sized_graph_split_into_longer_segments(reduce, weighted):
    """The skewed graph (600,000 entries, past MID_GRAPH_EDGES) splits its rows into SMALL_SEGMENT-entry
    segments at K = 64 and MID_SEGMENT-entry ones at K = 128 and 602: each schedule's outputs and gradients
    against float64."""
    g = skewed_graph()
    for k, segment in ((64, autograd.SMALL_SEGMENT), (128, autograd.MID_SEGMENT), (602, autograd.MID_SEGMENT)):
        sched = autograd._schedule(g, "csr", k)
        assert sched.segment == segment and sched.num_partials > 0
        x, w = inputs(g, k, torch.float32, weighted)
        run_and_compare("gespmm", g, x, w, reduce)


# gas and hpspmm hand max/min to GE-SpMM, so deterministic=True takes them there (it refused them before)
DETERMINISTIC = [(b, r) for b in ("gespmm", "gar") for r in REDUCES] + [
    (b, r) for b in ("gas", "hpspmm") for r in ("max", "min")]


@pytest.mark.parametrize("k", [7, 64, 602])
@pytest.mark.parametrize(("backend", "reduce", "dtype"), [(b, r, torch.float32) for b, r in DETERMINISTIC] + [
    ("gespmm", r, dt) for r in REDUCES for dt in HALF_DTYPES])
def test_bitwise_deterministic(backend, reduce, k, dtype):
    assert_two_runs_equal(skewed_graph(), backend, reduce, k, dtype)


@pytest.mark.parametrize("k", [7, 64, 602])
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("dtype", [torch.float32, *HALF_DTYPES])
def test_bitwise_deterministic_with_the_in_kernel_fold(reduce, k, dtype, monkeypatch):
    """The skewed graph's thousands of partials (12,696 in 32-entry segments) go to gespmm_combine; here the row
    kernel folds them, whichever group completes a row's counter (the fold's order must not depend on which)."""
    limit = spmm_kernels.FOLD_MAX_PARTIALS
    fold_split_rows(monkeypatch, True)
    base = skewed_graph()
    g = graphfuse.Graph(base.edge_index, num_nodes=base.num_nodes)  # its plans are built under the patched limit
    assert autograd._schedule(g, "csr", k).num_partials > limit  # unpatched, gespmm_combine would fold them
    assert_two_runs_equal(g, "gespmm", reduce, k, dtype)


def assert_two_runs_equal(g, backend, reduce, k, dtype):
    """Output and both gradients bitwise equal across two runs under deterministic=True."""
    x, w = inputs(g, k, dtype, True, seed=11)
    grad = torch.randn(g.num_dst, k, device="cuda", dtype=dtype)
    results = []
    for _ in range(2):
        xi = x.clone().requires_grad_(True)
        wi = w.clone().requires_grad_(True)
        out = graphfuse.aggregate(g, xi, wi, reduce, backend=backend, deterministic=True)
        out.backward(grad)
        results.append((out.detach(), xi.grad, wi.grad))
    for a, b in zip(*results):
        assert torch.equal(a, b)


@pytest.mark.parametrize("backend", ["gas", "hpspmm"])
def test_atomic_backends_under_deterministic(backend):
    """Their own sum/mean aggregations are refused; their sddmm and edge softmax (atomic-free) run, match the
    float64 reference and repeat bitwise."""
    g = graph("hub")
    x = torch.randn(g.num_src, 8, device="cuda")
    for reduce in ("sum", "mean"):
        with pytest.raises(ValueError, match=f"backend '{backend}' is not deterministic on cuda for this call"):
            graphfuse.aggregate(g, x, reduce=reduce, backend=backend, deterministic=True)
    a = torch.randn(g.num_dst, 8, device="cuda")
    scores = torch.randn(g.num_edges, device="cuda")
    runs = [(graphfuse.sddmm(g, a, x, backend=backend, deterministic=True),
             graphfuse.edge_softmax(g, scores, backend=backend, deterministic=True)) for _ in range(2)]
    for first, second in zip(*runs):
        assert torch.equal(first, second)
    dots, soft = runs[0]
    scale = reference.sddmm(g, a.double().abs(), x.double().abs())  # the sums of |terms|
    assert_close(dots, reference.sddmm(g, a.double(), x.double()), scale)
    assert_close(soft, reference.edge_softmax(g, scores.double()))


@pytest.mark.parametrize("case", ["unsorted", "hub", "bipartite", "no_edges", "big_hub"])
@pytest.mark.parametrize("heads", [None, 1, 3])  # 1: (E, 1) like the reference, not (E,)
@pytest.mark.parametrize("k", [6, 96])
def test_sddmm_and_edge_softmax(case, heads, k):
    g = graph(case)
    shape_a = (g.num_dst, k) if heads is None else (g.num_dst, heads, k // heads)
    shape_b = (g.num_src, k) if heads is None else (g.num_src, heads, k // heads)
    a = torch.randn(shape_a, device="cuda")
    b = torch.randn(shape_b, device="cuda")
    out = graphfuse.sddmm(g, a, b, backend="gar")
    ref = reference.sddmm(g, a.double(), b.double())
    scale = reference.sddmm(g, a.double().abs(), b.double().abs())  # the sums of |terms|
    assert_close(out, ref, scale)
    scores = torch.randn(out.shape, device="cuda")
    soft = graphfuse.edge_softmax(g, scores, backend="gar")
    assert_close(soft, reference.edge_softmax(g, scores.double()))


def test_gas_fused_self_loops():
    g = graph("unsorted")
    x = torch.randn(g.num_src, 40, device="cuda")
    w = torch.rand(g.num_edges, device="cuda")
    sw = torch.rand(g.num_dst, device="cuda")
    out = gas_kernels.gas_forward(g.edge_index[0], g.edge_index[1], x, w, num_dst=g.num_dst, self_weight=sw)
    ref = reference.aggregate(g, x.double(), w.double()) + sw.double().unsqueeze(1) * x.double()
    assert_close(out, ref, reference.aggregate(g, x.double().abs(), w.double()) + sw.double().unsqueeze(1) * x.double().abs())
    grad = torch.randn_like(out)
    dx, _ = gas_kernels.gas_backward(g.edge_index[0], g.edge_index[1], grad, None, w, num_src=g.num_src,
                                     self_weight=sw)
    gt = graphfuse.Graph(g.edge_index.flip(0), num_nodes=g.num_nodes)
    ref_dx = reference.aggregate(gt, grad.double(), w.double()) + sw.double().unsqueeze(1) * grad.double()
    assert_close(dx, ref_dx, reference.aggregate(gt, grad.double().abs(), w.double()) + grad.double().abs())


def test_row_schedule_is_none_without_long_rows():
    rowptr = torch.tensor([0, 0, 5, 6, 6, 13], device="cuda")
    assert spmm_kernels.row_schedule(rowptr, 7) is None


@pytest.mark.parametrize("segment", [1, 2, 3, 100])
def test_row_schedule_covers_rows(segment):
    deg = torch.tensor([0, 5, 1, 0, 7, 2, 3, 250, 100, 101], device="cuda")
    rowptr = torch.cat([torch.zeros(1, dtype=torch.int64, device="cuda"), deg.cumsum(0)])
    sched = spmm_kernels.row_schedule(rowptr, segment)
    (beg, end), seg_row, seg_slot = sched.seg_range.unbind(1), sched.seg_row, sched.seg_slot
    seg_len = end - beg
    assert int(seg_len.max()) <= segment and int(seg_len.min()) >= 0
    # visited by length class, longest first, row order within a class (a split row's segments in order)
    visit = list(zip(length_class(seg_len, segment)[0].tolist(), seg_row.tolist(), beg.tolist()))
    assert visit == sorted(visit)
    # each row's segments tile exactly its entries
    for r in range(deg.numel()):
        segs = (seg_row == r).nonzero().flatten()
        assert segs.numel() >= 1
        assert beg[segs].tolist() == sorted(beg[segs].tolist())
        assert int(beg[segs[0]]) == int(rowptr[r]) and int(end[segs[-1]]) == int(rowptr[r + 1])
        assert beg[segs[1:]].tolist() == end[segs[:-1]].tolist()
        long = bool((sched.long_rows == r).any())
        assert long == (int(deg[r]) > segment)
        if long:  # consecutive workspace rows, in order, where both folds look for them
            i = int((sched.long_rows == r).nonzero())
            slots = (-seg_slot[segs] - 1).tolist()
            assert slots == list(range(int(sched.long_ptr[i]), int(sched.long_ptr[i + 1])))
            within = ((beg[segs] - rowptr[r]) // segment).tolist()
            assert [p - w for p, w in zip(slots, within)] == [slots[0]] * len(slots)
        else:
            assert seg_slot[segs].tolist() == [r]
    assert sched.segment == segment
    assert sched.num_partials == int(sched.long_ptr[-1])


@pytest.mark.parametrize("one_block", [False, True])
@pytest.mark.parametrize("rows", [1, 2, 1000, 70_000])
@pytest.mark.parametrize("segment", [1, 32, 256])
def test_row_schedule_matches_the_tensor_form(rows, segment, one_block, monkeypatch):
    """Empty rows, rows of exactly ``segment`` entries, hubs first and last, one row, against the oracle, on an
    allocator poisoned before the run; ``one_block``: both kernels on a single block, so that their
    grid-stride loops take many turns (the real grid's cap is reached only past 16M rows or segments)."""
    if one_block:
        monkeypatch.setattr(spmm_kernels, "_schedule_grid", lambda threads: (1,))
    gen = torch.Generator(device="cuda").manual_seed(rows + segment)
    deg = torch.randint(0, 3 * segment + 2, (rows,), device="cuda", generator=gen)
    deg[torch.randperm(rows, device="cuda", generator=gen)[: max(1, rows // 50)]] = 0
    deg[rows // 2] = segment
    deg[0] = 7 * segment + 1  # hubs
    deg[-1] = 40 * segment + 3
    rowptr = torch.cat([deg.new_zeros(1), deg.cumsum(0)])
    sched = spmm_kernels.row_schedule(rowptr, segment)
    want = torch_row_schedule(rowptr, segment)
    for name, got, expected in zip(sched._fields, sched, want):
        assert torch.equal(got, expected) if isinstance(got, torch.Tensor) else got == expected, name


def test_row_schedule_splits_only_above_split_above():
    """``split_above`` (the engine's SPLIT_MIN_DEGREE) leaves a graph unsplit unless a row is longer than it;
    when one is, every row longer than ``segment`` is split, as without it."""
    rowptr = torch.tensor([0, 5, 6, 6, 13], device="cuda")  # degrees 5, 1, 0, 7
    assert spmm_kernels.row_schedule(rowptr, 2, split_above=7) is None
    split = spmm_kernels.row_schedule(rowptr, 2, split_above=6)
    assert all(torch.equal(a, b) for a, b in zip(split[:5], spmm_kernels.row_schedule(rowptr, 2)[:5]))
    assert split.long_rows.tolist() == [0, 3] and split.num_partials == 3 + 4
    assert spmm_kernels.row_schedule(rowptr[:1], 2) is None  # no rows


def test_rows_are_split_only_past_the_minimum_degree():
    def star(degree):
        src = torch.arange(1, degree + 1)
        return graphfuse.Graph(torch.stack([src, torch.zeros_like(src)]), num_nodes=degree + 1).to("cuda")

    assert autograd._schedule(star(autograd.SPLIT_MIN_DEGREE), "csr", 64) is None
    sched = autograd._schedule(star(autograd.SPLIT_MIN_DEGREE + 1), "csr", 64)
    assert sched is not None and sched.long_rows.tolist() == [0] and sched.num_partials == 3
    step = autograd.SMALL_SEGMENT  # small graphs: short segments
    assert sched.seg_range[:3, 0].tolist() == [0, step, 2 * step]  # the hub's segments, visited first
    assert autograd._schedule(graphfuse.Graph(torch.empty(2, 0, dtype=torch.long, device="cuda"), num_nodes=0), "csr",
                              64) is None


def test_gespmm_schedule_splits_hub_rows():
    g = graph("big_hub")
    sched = spmm_kernels.row_schedule(g.csr.rowptr, 512)
    assert sched is not None and sched.num_partials >= 2
    x = torch.randn(g.num_src, 64, device="cuda")
    col = g.csr.col.int()
    for reduce in REDUCES:
        split, arg_split = spmm_kernels.gespmm(g.csr.rowptr, col, x, reduce=reduce, schedule=sched, return_arg=True)
        _, arg_whole = spmm_kernels.gespmm(g.csr.rowptr, col, x, reduce=reduce, return_arg=True)
        ref = reference.aggregate(g, x.double(), None, reduce)
        assert_close(split, ref, reference.aggregate(g, x.double().abs(), None, "sum") if reduce in ("sum", "mean")
                     else None)
        if arg_split is not None:
            assert torch.equal(arg_split, arg_whole)


def test_gespmm_refuses_a_schedule_of_another_rowptr():
    """A schedule built for another graph went to the kernel unchecked, which then read entries (and workspace
    rows) past this graph's nnz."""
    g = graph("big_hub")
    star = torch.stack([torch.arange(200), torch.zeros(200, dtype=torch.long)]).cuda()  # one row of 200 entries
    other = graphfuse.Graph(star, num_nodes=200)
    x = torch.randn(g.num_src, 8, device="cuda")
    with pytest.raises(ValueError, match="schedule must be row_schedule"):
        spmm_kernels.gespmm(g.csr.rowptr, g.csr.col.int(), x, schedule=spmm_kernels.row_schedule(other.csr.rowptr, 32))
    for segment in (32, 64):  # any segment length of this rowptr is fine
        good = spmm_kernels.gespmm(g.csr.rowptr, g.csr.col.int(), x,
                                   schedule=spmm_kernels.row_schedule(g.csr.rowptr, segment))
        assert_close(good[0], reference.aggregate(g, x.double()), reference.aggregate(g, x.double().abs()))


@pytest.mark.parametrize("in_kernel", [True, False])
@pytest.mark.parametrize("k", [7, 64, 602])
@pytest.mark.parametrize("reduce", REDUCES)
def test_gespmm_split_rows_fold_again_and_on_another_stream(k, reduce, in_kernel, monkeypatch):
    """Split rows folded in the row kernel (by the group that finishes a row's last segment, which resets the
    row's counter) or by gespmm_combine: repeated launches, and a launch on a second stream (with its own
    workspace), give the same bits and the same argmax as the unsplit kernel. K = 602 has five column tiles
    (one counter each), K = 7 several rows per warp; the big hub's row has thousands of 32-entry segments."""
    fold_split_rows(monkeypatch, in_kernel)
    g = graph("big_hub")
    x, w = inputs(g, k, torch.float32, True)
    wv, col, track = w[g.csr.perm].contiguous(), g.csr.col.int(), reduce in ("max", "min")
    plan = spmm_kernels.GespmmPlan(g.csr.rowptr, col, k=k, dtype=torch.float32, reduce=reduce, wmode=1,
                                   schedule=spmm_kernels.row_schedule(g.csr.rowptr, 32), track=track)
    assert plan.tiles == (5 if k == 602 else 1) and plan.fold_in_kernel == in_kernel
    out, arg = plan(x, wv)
    ref = reference.aggregate(g, x.double(), w.double(), reduce)
    assert_close(out, ref, None if track else reference.aggregate(g, x.double().abs(), w.double(), reduce))
    if track:
        whole = spmm_kernels.GespmmPlan(g.csr.rowptr, col, k=k, dtype=torch.float32, reduce=reduce, wmode=1,
                                        track=True)
        assert torch.equal(arg, whole(x, wv)[1])
    def poisoned_call():  # an unwritten element (e.g. a row whose fold did not run) must not show old results
        poison_next(out.shape)
        if track:
            poison_next(arg.shape, torch.int64, -7)
        return plan(x, wv)

    for _ in range(2):
        again = poisoned_call()
        assert torch.equal(again[0], out) and (not track or torch.equal(again[1], arg))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the allocator's blocks are per stream: poisoned there
        other = poisoned_call()
    torch.cuda.current_stream().wait_stream(side)
    assert torch.equal(other[0], out) and len(plan.workspaces) == 2


@functools.cache
def out_hub_edges() -> tuple[torch.Tensor, int]:
    """The big hub reversed: node 0 sends to 100,000 targets, so the transpose (CSC) has the long row."""
    hub = make_big_hub()
    return hub.edge_index.flip(0).cuda(), hub.num_nodes


@pytest.mark.parametrize("in_kernel", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("k", [7, 64])
@pytest.mark.parametrize("reduce", REDUCES)
def test_gespmm_gradients_through_a_split_transpose_row(reduce, k, weighted, in_kernel, monkeypatch):
    """The graph cases' rows are split only in the forward CSR: here a source with out-degree 100,000 makes
    GE-SpMM's backward over the CSC split its row (3,125 segments; the argmask mode for max/min), folded in the
    row kernel or by gespmm_combine. Feature and edge-weight gradients against float64."""
    fold_split_rows(monkeypatch, in_kernel)
    edge_index, n = out_hub_edges()
    g = graphfuse.Graph(edge_index, num_nodes=n)  # a new Graph: its plans are built under the patched limit
    assert autograd._schedule(g, "csc", k).num_partials > 0  # the transpose's row is split
    x, w = inputs(g, k, torch.float32, weighted)
    run_and_compare("gespmm", g, x, w, reduce)


def test_gespmm_split_rows_from_two_threads_on_one_stream(monkeypatch):
    """Two host threads on PyTorch's default stream share the plan's kept partials there: another thread's row
    kernel enqueued between a call's row kernel and its gespmm_combine overwrote the partials that combine then
    folded (found by the memory review). Frequent thread switches make that interleaving likely."""
    fold_split_rows(monkeypatch, False)
    g = graph("big_hub")
    plan = spmm_kernels.GespmmPlan(g.csr.rowptr, g.csr.col.int(), k=64, dtype=torch.float32,
                                   schedule=spmm_kernels.row_schedule(g.csr.rowptr, 32))
    assert plan.combine is not None
    xs = [torch.randn(g.num_src, 64, device="cuda", generator=torch.Generator("cuda").manual_seed(s)) for s in (1, 2)]
    want = [plan(x)[0] for x in xs]
    bad = []

    def run(i):
        outs = [plan(xs[i])[0] for _ in range(300)]
        torch.cuda.synchronize()
        bad.extend(i for out in outs if not torch.equal(out, want[i]))

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=run, args=(i,)) for i in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(previous)
    assert not bad and len(plan.workspaces) == 1


@pytest.mark.parametrize("in_kernel", [True, False])
def test_gespmm_split_rows_in_cuda_graphs(in_kernel, monkeypatch):
    """A call captured into a CUDA graph gets a split-row workspace of its own, its counters' zeroing captured
    with it (run at each replay, not at capture). A second graph captured on the same stream, and an eager call
    on that stream afterwards, must not pick up a workspace whose zeroing never ran (poisoned here the way such
    memory may hold anything); each gives the eager result bit for bit."""
    fold_split_rows(monkeypatch, in_kernel)
    g = graph("big_hub")
    x = torch.randn(g.num_src, 64, device="cuda")
    plan = spmm_kernels.GespmmPlan(g.csr.rowptr, g.csr.col.int(), k=64, dtype=torch.float32,
                                   schedule=spmm_kernels.row_schedule(g.csr.rowptr, 32))
    assert plan.fold_in_kernel == in_kernel
    expected = plan(x)[0]
    stream = torch.cuda.Stream()
    graphs, outs = [], []
    for _ in range(2):
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured, stream=stream):
            outs.append(plan(x)[0])
        graphs.append(captured)
    kept = plan.workspaces.get(stream.cuda_stream)
    if kept is not None and kept[0] is not None:
        kept[0].fill_(12345)
    graphs[1].replay()
    graphs[0].replay()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        eager = plan(x)[0]
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    for out in (*outs, eager):
        assert torch.equal(out, expected)


@pytest.mark.parametrize("backend", ["hpspmm", "gas"])
def test_atomic_backends_zero_their_outputs_on_the_current_stream(backend):
    """HP-SpMM and GAS add atomically into a zeroed output (forward, feature and weight gradients). The zeroing
    must go to PyTorch's current stream: run on a side stream while the default stream is held busy, a zeroing
    sent to the default stream would land after the kernel and wipe its sums. Captured into a CUDA graph, it must
    be captured too (run at every replay): a second replay with other features would otherwise add onto the
    first one's output."""
    g = graph("big_hub")
    x, w = inputs(g, 41, torch.float32, weighted=True)
    grad = torch.randn(g.num_dst, 41, device="cuda")
    ref, ref_dx, ref_dw = reference_with_grads(g, x.double(), w.double(), "sum", grad.double())
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    torch.cuda._sleep(200_000_000)  # ~0.1 s of the default stream
    with torch.cuda.stream(side):
        xg, wg = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        out = graphfuse.aggregate(g, xg, wg, backend=backend)
        out.backward(grad)
    torch.cuda.synchronize()
    assert_close(out.detach(), ref, reference.aggregate(g, x.double().abs(), w.double(), "sum"))
    assert_close(xg.grad, ref_dx, _grad_x_scale(g, w.double(), grad, "sum"))
    assert_close(wg.grad, ref_dw, _grad_w_scale(g, x.double(), grad, "sum", w.shape))
    static = x.clone()
    graphfuse.aggregate(g, static, w, backend=backend)  # warm-up: the graph's formats and plans exist
    captured = torch.cuda.CUDAGraph()
    with torch.cuda.graph(captured, stream=side):
        replayed = graphfuse.aggregate(g, static, w, backend=backend)
    for seed in (1, 2):
        static.copy_(inputs(g, 41, torch.float32, weighted=False, seed=seed)[0])
        captured.replay()
        torch.cuda.synchronize()
        assert_close(replayed, reference.aggregate(g, static.double(), w.double(), "sum"),
                     reference.aggregate(g, static.double().abs(), w.double(), "sum"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_auto_and_layers_run_on_backend(backend):
    """The layers on a kernel backend against a float64 copy of themselves on the reference: outputs and the
    gradients of the input and of every parameter."""
    nn = pytest.importorskip("graphfuse.nn")
    g = graph("hub")
    x = torch.randn(g.num_src, 16, device="cuda")
    torch.manual_seed(0)
    layers = [nn.GCNConv(16, 8), nn.GATConv(16, 4, heads=2), nn.SAGEConv(16, 8, aggr="max"),
              nn.SAGEConv(16, 8, aggr="mean")]
    for layer in layers:
        layer = layer.cuda()
        ref_layer = copy.deepcopy(layer).double()
        x64 = x.double().requires_grad_(True)
        with graphfuse.use_backend("reference"):
            ref = ref_layer(x64, g)
        grad = torch.randn(ref.shape, device="cuda")
        ref.backward(grad.double())
        xi = x.clone().requires_grad_(True)
        with graphfuse.use_backend(backend):
            out = layer(xi, g)
        out.backward(grad)
        pairs = [(out, ref), (xi.grad, x64.grad)]
        pairs += [(p.grad, q.grad) for p, q in zip(layer.parameters(), ref_layer.parameters(), strict=True)]
        for got, want in pairs:
            atol = 1e-4 * max(1.0, float(want.detach().abs().max()))
            torch.testing.assert_close(got.detach().double(), want.detach(), rtol=1e-4, atol=atol)
    out = graphfuse.aggregate(g, x)  # "auto" on CUDA picks a kernel backend and matches the reference
    assert_close(out, reference.aggregate(g, x.double()), reference.aggregate(g, x.double().abs()))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
@pytest.mark.parametrize("case", ["hub", "unsorted", "bipartite", "no_edges", "big_hub"])
def test_calls_without_gradient_match_on_every_memo_hit(case, reduce, backend):
    """A call without gradient runs what the graph's dispatch memo bound for its signature (BoundAggregate:
    the GE-SpMM / HP-SpMM plan looked up once). Its first call and later hits match the float64 reference:
    with the graph's own weights, also after they change in place, with other weights, unweighted, at another
    width, for 3-D features, and under torch.no_grad on features that require a gradient."""
    base = graph(case)
    w0 = torch.rand(base.num_edges, device="cuda") + 0.5
    g = graphfuse.Graph(base.edge_index, num_src=base.num_src, num_dst=base.num_dst, edge_weight=w0)

    def check(x, w):
        weights = g.edge_weight if w is None else w
        poison_next((g.num_dst, *x.shape[1:]))  # else a hit could get the previous call's correct output block
        out = graphfuse.aggregate(g, x, w, reduce, backend=backend)
        ref = reference.aggregate(g, x.double(), weights.double(), reduce)
        scale = reference.aggregate(g, x.double().abs(), weights.double(), reduce) if reduce != "max" else None
        assert_close(out, ref, scale)

    for k in (64, 41, 64):
        x = torch.randn(g.num_src, k, device="cuda")
        for _ in range(2):
            check(x, None)
        check(x, torch.rand(g.num_edges, device="cuda"))
        g.edge_weight.mul_(2.0)  # in place: the memo's permuted copy must follow
        check(x, None)
    check(torch.randn(g.num_src, 2, 8, device="cuda"), None)
    x = torch.randn(g.num_src, 64, device="cuda", requires_grad=True)
    with torch.no_grad():
        check(x, None)
    unweighted = graphfuse.Graph(base.edge_index, num_src=base.num_src, num_dst=base.num_dst)
    xu = torch.randn(g.num_src, 32, device="cuda")
    for _ in range(2):
        poison_next((unweighted.num_dst, 32))
        out = graphfuse.aggregate(unweighted, xu, reduce=reduce, backend=backend)
        scale = reference.aggregate(unweighted, xu.double().abs(), None, reduce) if reduce != "max" else None
        assert_close(out, reference.aggregate(unweighted, xu.double(), None, reduce), scale)


# ------------------------------------------------------------------------------------------ HP-SpMM
@pytest.mark.parametrize("npw", [8, 64, 512])
@pytest.mark.parametrize("k", [7, 64, 100])
@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("case", ["skewed", "big_hub", "hub"])
def test_hp_spmm_every_task_split(case, reduce, k, npw):
    """Fixed NnzPerWarp from 8 to 512: rows wholly inside a worker (stored) and rows cut between workers
    (atomics) in every mix; over the CSR (forward) and the CSC (feature gradient) hybrid forms."""
    g = skewed_graph() if case == "skewed" else graph(case)
    x, w = inputs(g, k, torch.float32, True, seed=npw)
    for fmt, gt in (("csr", g), ("csc", graphfuse.Graph(g.edge_index.flip(0), num_src=g.num_dst,
                                                         num_dst=g.num_src))):
        ptr, row = (g.csr.rowptr, g.csr.row) if fmt == "csr" else (g.csc.colptr, g.csc.col)
        idx = (g.csr.col if fmt == "csr" else g.csc.row).int()
        perm = g.csr.perm if fmt == "csr" else g.csc.perm
        xs = x if fmt == "csr" else torch.randn(g.num_dst, k, device="cuda")
        plan = hp_spmm_kernels.HpSpmmPlan(ptr, row, idx, k=k, dtype=x.dtype, reduce=reduce, weighted=True, npw=npw)
        out = plan(xs, w[perm].contiguous())
        ref = reference.aggregate(gt, xs.double(), w.double(), reduce)
        assert_close(out, ref, reference.aggregate(gt, xs.double().abs(), w.double(), reduce))


@pytest.mark.parametrize("reduce", REDUCES)
def test_gespmm_misaligned_features_take_the_scalar_twin(reduce):
    g = graph("big_hub")
    base = torch.randn(g.num_src * 64 + 1, device="cuda")
    x = base[1:].view(g.num_src, 64)  # contiguous but misaligned for float4
    out = graphfuse.aggregate(g, x, reduce=reduce, backend="gespmm")
    scale = reference.aggregate(g, x.double().abs(), None, reduce) if reduce in ("sum", "mean") else None
    assert_close(out, reference.aggregate(g, x.double(), None, reduce), scale)


def test_hp_spmm_misaligned_and_unweighted():
    g = graph("hub")
    base = torch.randn(g.num_src * 64 + 1, device="cuda")
    x = base[1:].view(g.num_src, 64)  # misaligned for float4: the scalar twin
    out = hp_spmm_kernels.hp_spmm(g.csr.rowptr, g.csr.row, g.csr.col.int(), x)
    assert_close(out, reference.aggregate(g, x.double()), reference.aggregate(g, x.double().abs()))


# ------------------------------------------------------------------------------------------ HP-SDDMM
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("heads", [1, 3])
@pytest.mark.parametrize("c", [1, 7, 16, 41, 64, 128, 602, 1500])
@pytest.mark.parametrize("case", CASES)
def test_hp_sddmm_matches_reference(case, c, heads, dtype):
    """Every (edge, head) dot product against float64, in COO order, scaled and not; C = 1500 takes several
    column tiles (no register reuse), odd C takes scalar loads."""
    check_hp_sddmm(graph(case), c, heads, dtype)


@pytest.mark.parametrize("npw", sddmm_kernels.NNZ_PER_WARP)
@pytest.mark.parametrize("heads, c", [(1, 7), (3, 41), (2, 128), (1, 602)])
@pytest.mark.parametrize("case", ["unsorted", "duplicates", "hub", "big_hub", "skewed"])
def test_hp_sddmm_every_nnz_per_warp(monkeypatch, case, heads, c, npw):
    """The graph cases hold at most ~360,000 tasks (the big hub's edges x 3 heads), which nnz_per_warp gives 8 on an
    H100/H200 (more than 2 full waves at 32 need ~540,000): here each NnzPerWarp is forced, so warps run 8 to 512
    tasks across row and head boundaries."""
    monkeypatch.setattr(sddmm_kernels, "nnz_per_warp", lambda tasks, full_wave, workers=8: npw)
    check_hp_sddmm(skewed_graph() if case == "skewed" else graph(case), c, heads, torch.float32)


def check_hp_sddmm(g, c, heads, dtype):
    """hp_sddmm on ``g`` with ``heads`` blocks of ``c`` columns against float64, unscaled and scaled."""
    gen = torch.Generator(device="cuda").manual_seed(c)
    a = torch.randn(g.num_dst, heads * c, generator=gen, device="cuda", dtype=dtype)
    b = torch.randn(g.num_src, heads * c, generator=gen, device="cuda", dtype=dtype)
    scale = torch.rand(g.num_edges, generator=gen, device="cuda", dtype=dtype) + 0.5
    csr = g.csr
    src, dst = g.edge_index
    terms = a.double().view(-1, heads, c)[dst] * b.double().view(-1, heads, c)[src]
    ref, bound = terms.sum(-1), terms.abs().sum(-1)
    if heads == 1:
        ref, bound = ref.view(-1), bound.view(-1)
    for s in (None, scale):
        out = sddmm_kernels.hp_sddmm(csr.row, csr.col.int(), csr.perm, a, b, heads=heads, scale=s)
        factor = 1.0 if s is None else s.double().view(-1, *([1] * (ref.dim() - 1)))
        assert out.shape == ref.shape
        assert_close(out, ref * factor, bound * (1.0 if s is None else factor))


def test_hp_sddmm_misaligned_operands_and_every_task_split():
    """A view offset by one element forces scalar loads; tiny and huge task counts cover NnzPerWarp 8 … 512."""
    g = graph("hub")
    csr = g.csr
    base = torch.randn(g.num_dst * 64 + 1, device="cuda")
    a = base[1:].view(g.num_dst, 64)  # misaligned for float4
    b = torch.randn(g.num_src, 64, device="cuda")
    out = sddmm_kernels.hp_sddmm(csr.row, csr.col.int(), csr.perm, a, b)
    src, dst = g.edge_index
    ref = (a.double()[dst] * b.double()[src]).sum(-1)
    assert_close(out, ref, (a.double()[dst] * b.double()[src]).abs().sum(-1))
    full = 132 * 8
    assert sddmm_kernels.nnz_per_warp(10, full) == 8
    assert sddmm_kernels.nnz_per_warp(10**10, full) == 512
    assert sddmm_kernels.nnz_per_warp(64 * 8 * 2 * full + 1, full) == 64


def test_hp_sddmm_is_bitwise_deterministic():
    g = skewed_graph()
    csr = g.csr
    a = torch.randn(g.num_dst, 96, device="cuda")
    b = torch.randn(g.num_src, 96, device="cuda")
    runs = [sddmm_kernels.hp_sddmm(csr.row, csr.col.int(), csr.perm, a, b, heads=2) for _ in range(2)]
    assert torch.equal(*runs)


# ------------------------------------------------------------------------------------------ ES-SpMM (engine)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("strategy", ["bucket", "fastrand", "random"])
def test_sampled_aggregate_through_the_engine(strategy, reduce, monkeypatch):
    """``aggregate(..., sampling=)`` on CUDA runs the ES-SpMM kernel ("auto" and every kernel backend name; its
    plan's calls counted) and equals the reference's edge sampling; per-head weights go to the reference under
    "auto"."""
    calls = []
    launch = es_kernels.EsSpmmPlan.__call__
    monkeypatch.setattr(es_kernels.EsSpmmPlan, "__call__", lambda plan, *args: calls.append(plan) or launch(plan, *args))
    g = graph("big_hub")
    x, w = inputs(g, 41, torch.float32, True)
    s = graphfuse.EdgeSampling(16, strategy, seed=3)
    with torch.no_grad():
        ref = graphfuse.aggregate(g, x.double(), w.double(), reduce, sampling=s, backend="reference")
        scale = (graphfuse.aggregate(g, x.double().abs(), w.double(), reduce, sampling=s, backend="reference")
                 if reduce in ("sum", "mean") else None)
        assert not calls
        for n, backend in enumerate((None, "gespmm", "hpspmm"), 1):
            poison_next((g.num_dst, 41))
            assert_close(graphfuse.aggregate(g, x, w, reduce, sampling=s, backend=backend), ref, scale)
            assert len(calls) == n, f"backend={backend!r} did not run the ES-SpMM kernel"
        x3, w3 = inputs(g, 8, torch.float32, True, heads=2)
        out3 = graphfuse.aggregate(g, x3, w3, reduce, sampling=s)
        assert len(calls) == 3  # per-head weights: the reference
        assert_close(out3, graphfuse.aggregate(g, x3.double(), w3.double(), reduce, sampling=s, backend="reference"),
                     None if reduce in ("max", "min") else graphfuse.aggregate(
                         g, x3.double().abs(), w3.double(), reduce, sampling=s, backend="reference"))
        with pytest.raises(ValueError, match="one weight per edge"):
            graphfuse.aggregate(g, x3, w3, reduce, sampling=s, backend="gespmm")


@pytest.mark.parametrize("in_kernel", [True, False])
@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("backend", ["gespmm", "gar", "gas", "hpspmm"])
def test_tied_max_min_gradients_match_the_reference(backend, reduce, in_kernel, monkeypatch):
    """Binary features tie almost every maximum: the kernels and the reference (CPU) give a tied gradient to the
    same entry, the first in CSR order (the reference split it evenly before). Node 0 also receives 600 edges:
    GE-SpMM splits its row into 32-entry segments, so ties also fall across segments, where the fold (in the row
    kernel or gespmm_combine) must keep the earlier segment's entry."""
    fold_split_rows(monkeypatch, in_kernel)
    gen = torch.Generator().manual_seed(5)
    hub = torch.stack([torch.randint(0, 300, (600,), generator=gen), torch.zeros(600, dtype=torch.long)])
    g = graphfuse.Graph(torch.cat([torch.randint(0, 300, (2, 4000), generator=gen), hub], 1), num_nodes=300)
    x = (torch.rand(300, 41, generator=gen) < 0.3).double()
    w = torch.randint(1, 3, (g.num_edges,), generator=gen).double()
    grad = torch.randn(300, 41, generator=gen, dtype=torch.float64)
    results = []
    for graph, device, name in ((g, "cpu", "reference"), (g.to("cuda"), "cuda", backend)):
        xi, wi = x.to(device).clone().requires_grad_(), w.to(device).clone().requires_grad_()
        out = graphfuse.aggregate(graph, xi, wi, reduce, backend=name)
        out.backward(grad.to(device))
        results.append([t.cpu() for t in (out.detach(), xi.grad, wi.grad)])
    for got, want in zip(results[1], results[0]):  # sums of gradients may add in another order: not bitwise
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
