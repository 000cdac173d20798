"""Edge-sampled inference (ES-SpMM semantics): exact rows, the three strategies, scaling, statistics of the
random strategy, and the argument checks."""

from __future__ import annotations

import pytest
import torch

import graphfuse
from graphfuse.engine.edge_sampling import (
    EdgeSampling,
    current_sampling,
    hash_uniforms,
    kept_entries,
    use_sampling,
)

HUB_DEGREE = 40


def hub_graph(degree: int = HUB_DEGREE, shuffled: bool = False) -> graphfuse.Graph:
    """Target 0 receives from sources 1..degree; target 1 from 2 and 3; the other targets from nobody. In CSR
    order (each target's sources ascending), CSR positions equal COO edge ids unless ``shuffled`` (the COO
    columns in a random order, so that mixing the two up shows)."""
    src = torch.cat([torch.arange(1, degree + 1), torch.tensor([2, 3])])
    dst = torch.cat([torch.zeros(degree, dtype=torch.long), torch.tensor([1, 1])])
    edge_index = torch.stack([src, dst])
    if shuffled:
        edge_index = edge_index[:, torch.randperm(src.numel(), generator=torch.Generator().manual_seed(0))]
    return graphfuse.Graph(edge_index, num_nodes=degree + 1)


def kept_sources(g: graphfuse.Graph, sampling: EdgeSampling, target: int = 0) -> list[int]:
    position, owner, _ = kept_entries(g.csr, sampling)
    return g.csr.col[position[owner == target]].tolist()


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("strategy", ["bucket", "fastrand", "random"])
def test_rows_within_the_width_are_exact_and_empty_rows_are_zero(strategy, reduce):
    g = hub_graph(shuffled=True)
    x = torch.randn(g.num_src, 5, dtype=torch.float64)
    w = torch.rand(g.num_edges, dtype=torch.float64) + 0.5
    full = graphfuse.aggregate(g, x, w, reduce)
    out = graphfuse.aggregate(g, x, w, reduce, sampling=EdgeSampling(HUB_DEGREE, strategy))
    torch.testing.assert_close(out, full)
    small = graphfuse.aggregate(g, x, w, reduce, sampling=EdgeSampling(8, strategy))
    torch.testing.assert_close(small[1:], full[1:])  # target 1 (2 in-edges) exact, the rest empty → 0
    assert bool((small[2:] == 0).all())


def test_bucket_keeps_the_first_entries_and_scales_the_sum():
    g = hub_graph()
    assert kept_sources(g, EdgeSampling(8, "bucket")) == list(range(1, 9))
    x = torch.ones(g.num_src, 1, dtype=torch.float64)
    out = graphfuse.aggregate(g, x, sampling=EdgeSampling(8, "bucket"))
    assert out[0].item() == pytest.approx(HUB_DEGREE)  # 8 kept × 40 / 8
    mean = graphfuse.aggregate(g, x, reduce="mean", sampling=EdgeSampling(8, "bucket"))
    assert mean[0].item() == pytest.approx(1.0)


def test_fastrand_strides_by_a_prime_that_does_not_divide_the_degree():
    assert kept_sources(hub_graph(40), EdgeSampling(8, "fastrand")) == [1 + (s * 577) % 40 for s in range(8)]
    kept = kept_sources(hub_graph(2 * 577), EdgeSampling(8, "fastrand"))  # 577 would visit two entries only
    assert kept == [1 + (s * 1009) % 1154 for s in range(8)] and len(set(kept)) == 8


def test_random_is_a_seeded_subset_without_replacement():
    g = hub_graph()
    a = kept_sources(g, EdgeSampling(8, "random", seed=1))
    assert len(set(a)) == 8 and a == sorted(a)
    assert a == kept_sources(g, EdgeSampling(8, "random", seed=1))
    assert any(kept_sources(g, EdgeSampling(8, "random", seed=s)) != a for s in range(2, 6))


def test_random_includes_every_neighbour_with_probability_width_over_degree():
    g = hub_graph()
    seeds, width = 3000, 8
    counts = torch.zeros(g.num_src)
    for seed in range(seeds):
        counts[kept_sources(g, EdgeSampling(width, "random", seed=seed))] += 1
    p = width / HUB_DEGREE
    tolerance = 5 * (p * (1 - p) / seeds) ** 0.5
    assert float((counts[1:] / seeds - p).abs().max()) < tolerance
    assert counts[0].item() == 0


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_random_sum_and_mean_are_unbiased(reduce):
    g = hub_graph()
    x = torch.randn(g.num_src, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    full = graphfuse.aggregate(g, x, reduce=reduce)[0]
    estimates = torch.stack([graphfuse.aggregate(g, x, reduce=reduce, sampling=EdgeSampling(8, "random", seed=s))[0]
                             for s in range(2000)])
    standard_error = estimates.std(0) / estimates.size(0) ** 0.5
    assert bool(((estimates.mean(0) - full).abs() <= 5 * standard_error).all())


def test_multi_head_weights_and_extrema():
    g = hub_graph(shuffled=True)
    x = torch.randn(g.num_src, 2, 3, dtype=torch.float64)
    w = torch.rand(g.num_edges, 2, dtype=torch.float64)
    sampling = EdgeSampling(8, "random", seed=4)
    kept = kept_sources(g, sampling)
    eid = {int(s): e for e, s in enumerate(g.edge_index[0].tolist()) if g.edge_index[1, e] == 0}
    messages = torch.stack([w[eid[s]].view(2, 1) * x[s] for s in kept])
    out = graphfuse.aggregate(g, x, w, "max", sampling=sampling)
    torch.testing.assert_close(out[0], messages.max(0).values)
    out = graphfuse.aggregate(g, x, w, "sum", sampling=sampling)
    torch.testing.assert_close(out[0], messages.sum(0) * HUB_DEGREE / 8)
    one_head = graphfuse.aggregate(g, x[:, 0], w[:, 0], "sum", sampling=sampling)  # (E,) weights
    torch.testing.assert_close(one_head[0], messages[:, 0].sum(0) * HUB_DEGREE / 8)


def test_hash_uniforms_are_deterministic_and_in_range():
    rows = torch.arange(1000)
    u = hash_uniforms(7, rows, 16)
    assert torch.equal(u, hash_uniforms(7, rows, 16))
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0
    assert abs(float(u.mean()) - 0.5) < 0.01
    assert not torch.equal(u, hash_uniforms(8, rows, 16))
    assert hash_uniforms(2**63 - 1, rows[:2], 2).shape == (2, 2)


@pytest.mark.parametrize("kwargs, match", [
    ({"width": 0}, "width must be an int in"), ({"width": 513}, "width must be an int in"),
    ({"width": True}, "width must be an int in"), ({"strategy": "first"}, "strategy must be one of"),
    ({"strategy": ["random"]}, "strategy must be one of"),  # unhashable: a bare TypeError before (review)
    ({"seed": -1}, "seed must be an int in"),
])
def test_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=f"EdgeSampling: {match}"):
        EdgeSampling(**kwargs)


def test_refuses_gradients_wrong_types_and_cpu_tensors_on_kernel_backends():
    g = hub_graph()
    x = torch.randn(g.num_src, 3, requires_grad=True)
    with pytest.raises(ValueError, match="sampling= is for inference"):
        graphfuse.aggregate(g, x, sampling=EdgeSampling())
    w = torch.rand(g.num_edges, requires_grad=True)  # learned edge weights, features without a gradient
    with pytest.raises(ValueError, match="sampling= is for inference"):
        graphfuse.aggregate(g, x.detach(), w, sampling=EdgeSampling(8))
    with torch.no_grad():
        assert graphfuse.aggregate(g, x, sampling=EdgeSampling()).shape == (g.num_dst, 3)
    with pytest.raises(TypeError, match="sampling must be a graphfuse.EdgeSampling"):
        graphfuse.aggregate(g, x.detach(), sampling=64)
    # the messages named the internal op, "sampled_aggregate:", where the caller called aggregate (review)
    with pytest.raises(ValueError, match="^aggregate: backend 'gespmm' runs on \\['cuda'\\] tensors"):
        graphfuse.aggregate(g, x.detach(), sampling=EdgeSampling(), backend="gespmm")
    with pytest.raises(ValueError, match="^aggregate: unknown backend 'nope'"):
        graphfuse.aggregate(g, x.detach(), sampling=EdgeSampling(), backend="nope")


def test_use_sampling_switches_every_aggregate_in_a_model():
    from graphfuse.nn import GCNConv

    g = hub_graph()
    conv = GCNConv(3, 4)
    x = torch.randn(g.num_src, 3)
    with torch.no_grad():
        full = conv(x, g)
        with graphfuse.use_sampling(EdgeSampling(8, "bucket")):
            sampled = conv(x, g)
            with graphfuse.use_sampling(None):
                torch.testing.assert_close(conv(x, g), full)
        torch.testing.assert_close(conv(x, g), full)
    assert not torch.allclose(sampled[0], full[0])  # the hub row is sampled
    torch.testing.assert_close(sampled[1:], full[1:])  # the others are within the width
    with graphfuse.use_sampling(EdgeSampling(8)), pytest.raises(ValueError, match=r"use_sampling\(...\) is for inf"):
        conv(x, g)  # parameters need gradients
    from graphfuse.nn import SAGEConv

    sage = SAGEConv(3, 4)  # aggregates the raw x (no gradient) before its linear layer: trained on sampled sums
    with graphfuse.use_sampling(EdgeSampling(8)), pytest.raises(ValueError, match=r"use_sampling\(...\) is for inf"):
        sage(x, g)
    with pytest.raises(TypeError, match="use_sampling: sampling must be a graphfuse.EdgeSampling"):
        with graphfuse.use_sampling(8):
            pass


def test_use_sampling_leaves_gat_exact_and_is_per_thread():
    """GAT's attention is not sampled on any path (the CPU reference sampled it while the fused kernel did not),
    and a thread's setting does not reach another thread's calls."""
    import threading

    from graphfuse.nn import GATConv

    g = hub_graph()
    conv = GATConv(3, 4, heads=2).eval()
    x = torch.randn(g.num_src, 3)
    with torch.no_grad():
        full = conv(x, g)
        with graphfuse.use_sampling(EdgeSampling(1, "bucket")):
            torch.testing.assert_close(conv(x, g), full)
    seen = []
    with graphfuse.use_sampling(EdgeSampling(8)):
        thread = threading.Thread(target=lambda: seen.append(graphfuse.engine.edge_sampling.current_sampling()))
        thread.start()
        thread.join()
    assert seen == [None]


def test_sampled_mean_divides_by_the_kept_count_without_overflow():
    """Mean = the mean of the kept entries (what the kernel computes): scaling the sum by d / width first
    overflowed float16 on a 3,000-degree row whose kept mean is 30."""
    g = hub_graph(3000)
    x = torch.full((g.num_src, 2), 30.0, dtype=torch.float16)
    out = graphfuse.aggregate(g, x, reduce="mean", sampling=EdgeSampling(64, "bucket"))
    assert torch.isfinite(out).all() and out[0].tolist() == [30.0, 30.0]


def test_half_precision_sampled_sum_scales_in_float32():
    """A hub's scale d / width (70,000 here) passes float16's largest value: cast first, it made inf and NaN."""
    d = 70_000
    g = graphfuse.Graph(torch.stack([torch.arange(1, d + 1), torch.zeros(d, dtype=torch.long)]), num_nodes=d + 1)
    x = torch.full((d + 1, 2), 1e-3)
    x[:, 1] = 0.0
    with torch.no_grad():
        for reduce in ("sum", "mean"):
            got = graphfuse.aggregate(g, x.half(), reduce=reduce, sampling=EdgeSampling(1, "bucket"))
            want = graphfuse.aggregate(g, x, reduce=reduce, sampling=EdgeSampling(1, "bucket"))
            assert got.dtype == torch.float16
            torch.testing.assert_close(got.float(), want, rtol=1e-3, atol=1e-6)


def test_use_sampling_is_undone_when_its_block_ends():
    with use_sampling(EdgeSampling(8)):
        assert current_sampling() == EdgeSampling(8)
    assert current_sampling() is None
    with pytest.raises(RuntimeError), use_sampling(EdgeSampling(4)):
        raise RuntimeError("boom")
    assert current_sampling() is None
