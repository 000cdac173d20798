"""GPU suite of ES-SpMM (kernels/es_spmm.py): every graph case × strategy × reduce × width × K × dtype, weighted
and unweighted, against ``edge_sampling.sampled_aggregate`` in float64 with the outputs NaN-poisoned first;
exact (bitwise) agreement on integer-valued features, which pins down the kept set of every row; determinism,
seed sensitivity, misaligned operands and empty shapes."""

from __future__ import annotations

import functools

import pytest
import torch

import graphfuse
from cases import GRAPH_CASES, TOLERANCES, make_big_hub, make_graph_case, poison
from graphfuse.engine.edge_sampling import EdgeSampling, sampled_aggregate
from graphfuse.kernels import es_spmm as es

pytestmark = pytest.mark.gpu

STRATEGIES = ["bucket", "fastrand", "random"]
REDUCES = ["sum", "mean", "max", "min"]
WIDTHS = [1, 16, 64, 512]
KS = [1, 7, 32, 41, 64, 128, 602]
CASES = GRAPH_CASES + ["big_hub", "degrees"]
# empty rows, d = width ± 1 for every tested width, 577·2 (FastRand's stride falls back to 1009) and 577·1009
# (falls back to 1597)
DEGREES = [0, 3, 1, 2, 15, 16, 17, 63, 64, 65, 511, 512, 513, 1154, 577 * 1009, 0, 700]


@functools.cache
def graph(case: str) -> graphfuse.Graph:
    if case == "big_hub":
        g = make_big_hub()
    elif case == "degrees":  # target i receives DEGREES[i] edges from 300 sources (repeats included)
        dst = torch.repeat_interleave(torch.arange(len(DEGREES)), torch.tensor(DEGREES))
        src = torch.randint(0, 300, (dst.numel(),), generator=torch.Generator().manual_seed(2))
        g = graphfuse.Graph(torch.stack([src, dst]), num_src=300, num_dst=len(DEGREES))
    else:
        g = make_graph_case(case)
    return g.to("cuda")


@functools.cache
def structure(case: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(rowptr int64, col int32, perm): the kernel's CSR and the COO edge id of each CSR entry."""
    csr = graph(case).csr
    return csr.rowptr.contiguous(), csr.col.to(torch.int32).contiguous(), csr.perm


@pytest.fixture(autouse=True)
def poison_allocator():
    poison()
    yield


def assert_close(out: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | None = None, context: str = "") -> None:
    """|out - ref| <= atol + rtol * scale (scale = |ref|, or the sum of |terms| for sums), with the tolerances
    of tests/cases.py for out's dtype. NaN never passes."""
    tol = TOLERANCES[out.dtype]
    assert out.shape == ref.shape, f"{context}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    out64 = out.double()
    assert torch.isfinite(out64).all(), f"{context}: output holds NaN/inf (an element was not written?)"
    bound = tol["atol"] + tol["rtol"] * (ref.abs() if scale is None else scale)
    err = (out64 - ref).abs()
    worst = (err - bound).max() if err.numel() else torch.tensor(-1.0)
    assert bool((err <= bound).all()), f"{context}: max error {err.max():.3e}, worst excess {worst:.3e}"


def inputs(case: str, k: int, dtype: torch.dtype, weighted: bool, seed: int = 0):
    """x (num_src, K) and edge weights in COO edge order (the reference's) and in CSR order (the kernel's)."""
    g = graph(case)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(g.num_src, k, generator=gen, device="cuda", dtype=dtype)
    if not weighted:
        return x, None, None
    w = torch.rand(g.num_edges, generator=gen, device="cuda", dtype=dtype) + 0.5
    return x, w, w[structure(case)[2]].contiguous()


def run(case, x, values, width, strategy, reduce, seed):
    rowptr, col, _ = structure(case)
    poison()
    return es.es_spmm(rowptr, col, x, values, width=width, strategy=strategy, seed=seed, reduce=reduce)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("case", CASES)
def test_es_spmm_matches_sampled_aggregate(case, strategy, reduce, width, dtype):
    g = graph(case)
    sampling = EdgeSampling(width, strategy, seed=11)
    for k in KS:
        for weighted in (False, True):
            x, w, values = inputs(case, k, dtype, weighted, seed=k)
            out = run(case, x, values, width, strategy, reduce, sampling.seed)
            x64, w64 = x.double(), None if w is None else w.double()
            ref = sampled_aggregate(g, x64, w64, reduce, sampling)
            scale = None
            if reduce in ("sum", "mean"):  # the sum of |terms|, scaled as the output: the summation's error bound
                scale = sampled_aggregate(g, x64.abs(), None if w64 is None else w64.abs(), reduce, sampling)
            assert out.dtype == dtype
            assert_close(out, ref, scale, f"k={k} weighted={weighted}")


@pytest.mark.parametrize("width", [16, 512])
@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("case", ["hub", "degrees", "duplicates"])
def test_extremum_of_nan_messages(case, strategy, reduce, width):
    """A row whose kept messages hold a NaN is NaN there, as in the reference (the strict comparison never took
    a NaN: such rows kept their finite extremum, all-NaN rows the identity -inf / +inf)."""
    g = graph(case)
    x, _, _ = inputs(case, 41, torch.float32, False)
    x[:, 0] = float("nan")
    x[1::3, 1:20] = float("nan")
    sampling = EdgeSampling(width, strategy, seed=5)
    out = run(case, x, None, width, strategy, reduce, sampling.seed).double()
    ref = sampled_aggregate(g, x.double(), None, reduce, sampling)
    assert ref.isnan().any() and not ref.isnan().all()
    assert torch.equal(out.isnan(), ref.isnan())
    assert torch.equal(out.nan_to_num(0.0), ref.nan_to_num(0.0))


@pytest.mark.parametrize("k", [7, 64])
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("case", ["hub", "big_hub", "degrees", "duplicates", "isolated"])
def test_kept_set_is_exact(case, strategy, width, k):
    """Integer-valued float64 features and weights: sums of the kept entries are exact, and the sum scale is
    the same double d / S on both sides, so sum, max and min must agree bit for bit with the reference — any
    row keeping a different entry set would (with overwhelming probability, over K random columns) differ."""
    g = graph(case)
    rowptr, col, perm = structure(case)
    gen = torch.Generator(device="cuda").manual_seed(width + k)
    x = torch.randint(-8, 9, (g.num_src, k), generator=gen, device="cuda").double()
    w = torch.randint(1, 4, (g.num_edges,), generator=gen, device="cuda").double()
    sampling = EdgeSampling(width, strategy, seed=2024)
    for weighted in (False, True):
        values = w[perm].contiguous() if weighted else None
        for reduce in REDUCES:
            out = run(case, x, values, width, strategy, reduce, sampling.seed)
            ref = sampled_aggregate(g, x, w if weighted else None, reduce, sampling)
            if reduce == "mean":  # (sum · d/S) / d there, sum · (1 / min(d, S)) here: a rounding apart
                torch.testing.assert_close(out, ref, rtol=1e-13, atol=1e-13)
            else:
                assert torch.equal(out, ref), f"{reduce} weighted={weighted}: kept sets differ"


def test_random_is_deterministic_and_follows_the_seed():
    case = "big_hub"
    x, _, _ = inputs(case, 64, torch.float32, False, seed=3)
    a = run(case, x, None, 64, "random", "sum", 0)
    b = run(case, x, None, 64, "random", "sum", 0)
    c = run(case, x, None, 64, "random", "sum", 1)
    assert torch.equal(a, b)
    assert not torch.equal(a[0], c[0])  # the hub row (d = 100,000 > 64) samples another subset
    deg = structure(case)[0].diff()
    small = (deg <= 64).nonzero().view(-1)
    assert torch.equal(a[small], c[small])  # rows aggregated exactly do not depend on the seed
    for strategy in ("bucket", "fastrand"):  # the seed only feeds "random"
        assert torch.equal(run(case, x, None, 64, strategy, "max", 0), run(case, x, None, 64, strategy, "max", 9))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [32, 64, 602])
def test_misaligned_operands_use_scalar_loads(dtype, k):
    case = "big_hub"
    g = graph(case)
    rowptr, col, perm = structure(case)
    base = torch.randn(g.num_src * k + 1, device="cuda", dtype=dtype)
    x = base[1:].view(g.num_src, k)  # contiguous, but one element off the vector alignment
    w = torch.rand(g.num_edges, device="cuda", dtype=dtype) + 0.5
    values = torch.empty(g.num_edges + 1, device="cuda", dtype=dtype)[1:]
    values.copy_(w[perm])
    sampling = EdgeSampling(64, "random", seed=5)
    for reduce in REDUCES:
        out = run(case, x, values, 64, "random", reduce, 5)
        ref = sampled_aggregate(g, x.double(), w.double(), reduce, sampling)
        scale = None
        if reduce in ("sum", "mean"):
            scale = sampled_aggregate(g, x.double().abs(), w.double(), reduce, sampling)
        assert_close(out, ref, scale, reduce)


def test_empty_shapes():
    rowptr, col, _ = structure("unsorted")
    out = es.es_spmm(rowptr, col, torch.empty(50, 0, device="cuda"), width=4, strategy="random")
    assert out.shape == (50, 0)
    empty = torch.zeros(1, dtype=torch.int64, device="cuda")
    out = es.es_spmm(empty, col[:0], torch.randn(5, 8, device="cuda"), width=4, strategy="bucket")
    assert out.shape == (0, 8)
