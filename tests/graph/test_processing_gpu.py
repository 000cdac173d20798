"""The fused CUDA graph-processing stage against the reference: exact structure and permutations, values
within 1e-6 relative of a float64 reference, every sort path, the int64 workspace, and clear errors. Outputs are
poisoned (the allocator's free blocks NaN) before every fused call."""

from __future__ import annotations

import pytest
import torch
from graph.processing_cases import ALL_CASES, SQUARE_CASES, processing_graph

from cases import poison
from graphfuse import Graph
from graphfuse.graph import convert, norm, processing
from graphfuse.kernels import graph_processing

pytestmark = pytest.mark.gpu

VALUE_RTOL = {torch.float32: 1e-6, torch.float64: 1e-12}


@pytest.fixture(autouse=True)
def poison_allocator():
    poison()
    yield


def as_float64(g: Graph) -> Graph:
    """The same graph with float64 weights (ones when unweighted): the oracle for values."""
    w = g.edge_weight.double() if g.edge_weight is not None else torch.ones(g.num_edges, dtype=torch.float64)
    return Graph(g.edge_index, edge_weight=w, num_src=g.num_src, num_dst=g.num_dst)


def value_dtype(g: Graph) -> torch.dtype:
    """dtype of the values the stage (and the reference) produce: the weights', float32 when unweighted."""
    return torch.float32 if g.edge_weight is None else g.edge_weight.dtype


def check(got: Graph, want: Graph, dtype: torch.dtype, expect_values: bool = True) -> None:
    """``got`` (CUDA, fused) equals ``want`` (CPU reference, float64 values); ``dtype``: of got's values."""
    assert got.device.type == "cuda"
    assert torch.equal(got.edge_index.cpu(), want.edge_index)
    csr, csc = got.csr, got.csc
    for name, a, b in zip(("rowptr", "col", "perm", "row"), csr, want.csr):
        assert a.dtype == torch.int64 and torch.equal(a.cpu(), b), f"csr.{name}"
    for name, a, b in zip(("colptr", "row", "perm", "col"), csc, want.csc):
        assert a.dtype == torch.int64 and torch.equal(a.cpu(), b), f"csc.{name}"
    assert torch.equal(got.csr_to_csc.cpu(), want.csr_to_csc)
    assert torch.equal(got.cached(("kernels", "index32", "csr"), lambda: None).cpu(), want.csr.col.int())
    assert torch.equal(got.cached(("kernels", "index32", "csc"), lambda: None).cpu(), want.csc.row.int())
    w = got.edge_weight
    if expect_values:
        assert w is not None and w.dtype == dtype
        torch.testing.assert_close(w.cpu().double(), want.edge_weight, rtol=VALUE_RTOL[dtype], atol=1e-300)
    if w is None:
        return
    # the weights in CSR/CSC order that the stage seeds for the engine (build_formats' too: the engine uses them
    # instead of permuting the weights itself)
    for fmt, perm in (("csr", csr.perm), ("csc", csc.perm)):
        seeded = got.cached(("kernels", "permuted", fmt), lambda: None, weighted=True)  # pre-filled, current
        assert seeded is not None and torch.equal(seeded, w[perm]), fmt


@pytest.mark.parametrize("name", SQUARE_CASES)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gcn_norm_matches_reference(name, weighted, dtype):
    g = processing_graph(name, weighted, dtype)
    gc = g.to("cuda")
    g64 = as_float64(g)
    for add_loops, improved in ((True, False), (True, True), (False, False)):
        poison()  # not the previous call's outputs
        got = processing.gcn_norm(gc, add_self_loops=add_loops, improved=improved, backend="fused")
        check(got, norm.gcn_norm(g64, add_self_loops=add_loops, improved=improved), value_dtype(g))


@pytest.mark.parametrize("name", SQUARE_CASES)
@pytest.mark.parametrize("weighted", [False, True])
def test_add_remaining_self_loops_matches_reference(name, weighted):
    g = processing_graph(name, weighted, torch.float32)
    gc = g.to("cuda")
    for fill in (1.0, 2.5):
        poison()
        got = processing.add_remaining_self_loops(gc, fill, backend="fused")
        check(got, norm.add_remaining_self_loops(as_float64(g), fill), torch.float32)


@pytest.mark.parametrize("name", ALL_CASES)
@pytest.mark.parametrize("weighted", [False, True])
def test_mean_norm_and_formats_match_reference(name, weighted):
    g = processing_graph(name, weighted, torch.float64)
    gc = g.to("cuda")
    check(processing.mean_norm(gc, backend="fused"), norm.mean_norm(as_float64(g)), value_dtype(g))
    poison()
    formats = processing.build_formats(gc, backend="fused")
    assert formats is gc and processing.build_formats(gc, backend="fused") is gc
    check(gc, g, torch.float64, expect_values=False)
    rowptr, _, perm = convert.coo_to_csr(g.edge_index, g.num_dst)
    assert torch.equal(gc.csr.rowptr.cpu(), rowptr) and torch.equal(gc.csr.perm.cpu(), perm)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_mean_norm_of_in_weights_summing_to_zero_is_zero(dtype):
    """The fused stage's 1/deg was inf where a target's in-edge weights sum to 0 (w · inf: NaN or ±inf)."""
    g = Graph(torch.tensor([[0, 1, 2, 0, 1], [1, 2, 2, 0, 0]]), num_nodes=3,
              edge_weight=torch.tensor([0.0, 1.0, 1.0, 1.0, -1.0], dtype=dtype))
    got = processing.mean_norm(g.to("cuda"), backend="fused")
    check(got, norm.mean_norm(as_float64(g)), dtype)
    assert got.edge_weight.tolist() == [0.0, 0.5, 0.5, 0.0, 0.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gcn_norm_of_a_negative_degree_is_nan_as_in_the_reference(dtype):
    """The fused stage gave deg^-1/2 = 0 where a weighted in-degree is negative; the reference and PyG give NaN
    (found by review)."""
    g = Graph(torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]]), num_nodes=3,
              edge_weight=torch.tensor([-3.0, 1.0, 1.0, 0.5], dtype=dtype))
    want = norm.gcn_norm(as_float64(g), add_self_loops=False)
    got = processing.gcn_norm(g.to("cuda"), add_self_loops=False, backend="fused")
    assert want.edge_weight.isnan().any() and not want.edge_weight.isnan().all()
    torch.testing.assert_close(got.edge_weight.cpu().double(), want.edge_weight, rtol=VALUE_RTOL[dtype], atol=1e-300,
                               equal_nan=True)


def test_unweighted_graphs_under_a_half_precision_default_dtype_take_the_reference():
    """The fused stage makes an unweighted graph's values in the default dtype, which it cannot do in float16: a
    TypeError about value_dtype, an argument the caller never passed (found by review)."""
    g = processing_graph("isolated", False).to("cuda")
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float16)
    try:
        assert processing.gcn_norm(g).edge_weight.dtype == torch.float16
        with pytest.raises(TypeError, match="gcn_norm: the fused stage takes float32/float64 values"):
            processing.gcn_norm(g, backend="fused")
    finally:
        torch.set_default_dtype(previous)


@pytest.mark.parametrize("name", ["isolated", "duplicates_loops", "giant_hub"])
@pytest.mark.parametrize("weighted", [False, True])
def test_self_loops_then_mean(name, weighted):
    g = processing_graph(name, weighted, torch.float32)
    got = processing.process_graph(g.to("cuda"), self_loops=True, fill_value=1.5, norm="mean", backend="fused")
    check(got, norm.mean_norm(norm.add_remaining_self_loops(as_float64(g), 1.5)), torch.float32)


def test_large_graph_multi_launch_scan():
    g = processing_graph("large", True, torch.float32)
    assert g.num_src + g.num_dst > graph_processing.SINGLE_BLOCK_SCAN
    check(processing.gcn_norm(g.to("cuda"), backend="fused"), norm.gcn_norm(as_float64(g)), torch.float32)
    g = processing_graph("many_loops", False)
    check(processing.add_remaining_self_loops(g.to("cuda"), backend="fused"),
          norm.add_remaining_self_loops(as_float64(g)), torch.float32)


@pytest.mark.parametrize("name", ALL_CASES + ["large"])
@pytest.mark.parametrize("weighted", [False, True])
def test_radix_path_matches_reference(monkeypatch, name, weighted):
    """The large-graph path (two radix sorts, no segment sort) on every case: the same outputs."""
    monkeypatch.setattr(graph_processing, "RADIX_MIN_ENTRIES", 0)
    check_every_stage(processing_graph(name, weighted, torch.float32))


@pytest.mark.parametrize("name", ["duplicates_loops", "warp_hub", "giant_hub", "many_loops"])
@pytest.mark.parametrize("weighted", [False, True])
def test_segment_sort_loops_past_its_grid(monkeypatch, name, weighted):
    """The segment sort with one block for the long (block-sorted) segments and one for the rest, so both of
    gp_sort's grid-stride loops run past their first pass (the cases have a few long segments and at most a few
    thousand short ones: the default grid covers them in one)."""
    monkeypatch.setattr(graph_processing, "BIG_GRID", 1)
    monkeypatch.setattr(graph_processing, "SORT_GRID_MAX", 1)
    check_every_stage(processing_graph(name, weighted, torch.float32))


def check_every_stage(g: Graph) -> None:
    """mean_norm, build_formats and (square graphs) gcn_norm and self-loops + mean on CUDA against the
    reference, each output poisoned first."""
    g64 = as_float64(g)
    check(processing.mean_norm(g.to("cuda"), backend="fused"), norm.mean_norm(g64), torch.float32)
    poison()
    formats = processing.build_formats(g.to("cuda"), backend="fused")
    check(formats, g, torch.float32, expect_values=False)
    if g.num_src == g.num_dst:
        poison()
        check(processing.gcn_norm(g.to("cuda"), backend="fused"), norm.gcn_norm(g64), torch.float32)
        poison()
        check(processing.process_graph(g.to("cuda"), self_loops=True, fill_value=1.5, norm="mean", backend="fused"),
              norm.mean_norm(norm.add_remaining_self_loops(g64, 1.5)), torch.float32)


@pytest.mark.parametrize("n", [0, 1, 4095, 4096, 3 * 4096 + 17, 100_003, 2_000_003])
@pytest.mark.parametrize("bound", [1, 2, 300, 1 << 21, 2**31 - 1])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_radix_sort_is_a_stable_sort(n, bound, dtype):
    """Every pass count (1 to 4), and a 489-tile input."""
    from graphfuse.kernels import radix_sort

    gen = torch.Generator().manual_seed(n + bound)
    keys = torch.randint(0, bound, (n,), generator=gen)
    keys[: n // 3] = bound - 1  # a long run of one key (a hub)
    keys = keys.to(dtype)
    a, b = torch.randint(0, 2**31 - 1, (2, n), generator=gen).to(dtype)
    want = torch.sort(keys, stable=True).indices
    got_keys, (pos, ca, cb) = radix_sort.sort_by_key(keys.cuda(), bound, [a.cuda(), b.cuda()])
    assert got_keys.dtype == torch.int32 and pos.dtype == torch.int32
    assert torch.equal(got_keys.cpu().long(), keys[want].long())
    assert torch.equal(pos.cpu().long(), want)
    assert torch.equal(ca.cpu().long(), a[want].long()) and torch.equal(cb.cpu().long(), b[want].long())
    got_keys, (ca, cb, cc) = radix_sort.sort_by_key(keys.cuda(), bound, [a.cuda(), b.cuda(), a.cuda()], iota=False)
    assert torch.equal(ca.cpu().long(), a[want].long()) and torch.equal(cc.cpu().long(), a[want].long())


@pytest.mark.parametrize("name", ["duplicates_loops", "giant_hub", "many_loops"])
def test_int64_workspace(monkeypatch, name):
    monkeypatch.setattr(graph_processing, "WORKSPACE_INT32_LIMIT", 64)
    g = processing_graph(name, True, torch.float32)
    check(processing.gcn_norm(g.to("cuda"), backend="fused"), norm.gcn_norm(as_float64(g)), torch.float32)


def test_duplicate_self_loops_keep_the_last_weight():
    ei = torch.tensor([[0, 2, 1, 2, 2], [1, 2, 0, 2, 0]])
    w = torch.tensor([1.0, 0.3, 2.0, 0.7, 4.0])
    got = processing.add_remaining_self_loops(Graph(ei, num_nodes=3, edge_weight=w).to("cuda"), 9.0,
                                              backend="fused")
    assert got.edge_index.tolist() == [[0, 1, 2, 0, 1, 2], [1, 0, 0, 0, 1, 2]]
    assert got.edge_weight.tolist() == pytest.approx([1.0, 2.0, 4.0, 9.0, 9.0, 0.7])


def test_deterministic_across_runs():
    g = processing_graph("giant_hub", False).to("cuda")
    a = processing.gcn_norm(g, backend="fused")
    b = processing.gcn_norm(g, backend="fused")
    assert torch.equal(a.edge_weight, b.edge_weight) and torch.equal(a.csr.perm, b.csr.perm)


def test_auto_uses_the_fused_stage_on_cuda():
    g = processing_graph("isolated", False).to("cuda")
    got = processing.gcn_norm(g)
    assert got.cached(("kernels", "index32", "csr"), lambda: None) is not None


@pytest.mark.parametrize(
    "edges, message",
    [
        ([[0, 1, 2], [1, 9, 0]], (r"1 edge\(s\) out of range: sources must lie in \[0, 5\) and targets in "
                                  r"\[0, 5\); the first is edge 1 = \(1, 9\)")),
        ([[0, -3, 2, 7], [1, 1, 0, 1]], r"2 edge\(s\) out of range.*the first is edge 1 = \(-3, 1\)"),
    ],
)
def test_out_of_range_indices_raise(edges, message):
    g = Graph(torch.tensor(edges), num_nodes=5, validate=False).to("cuda")
    for call in (lambda: processing.gcn_norm(g, backend="fused"), lambda: processing.mean_norm(g, backend="fused"),
                 lambda: processing.build_formats(g, backend="fused")):
        with pytest.raises(ValueError, match=f"process_graph: edge_index has {message}"):
            call()
    good = processing_graph("isolated", False).to("cuda")  # the stage still works afterwards
    check(processing.gcn_norm(good, backend="fused"), norm.gcn_norm(as_float64(processing_graph("isolated", False))),
          torch.float32)


def test_launcher_rejects_bad_input_on_cuda():
    ei = torch.tensor([[0, 1], [1, 0]], device="cuda")
    with pytest.raises(TypeError, match="process_graph: edge_index must have dtype torch.int64; got torch.int32"):
        graph_processing.process(ei.int(), 2, 2)
    with pytest.raises(TypeError, match="process_graph: edge_weight must have dtype"):
        graph_processing.process(ei, 2, 2, torch.ones(2, dtype=torch.float16, device="cuda"))
    with pytest.raises(ValueError, match="process_graph: edge_weight must be a CUDA tensor; got a tensor on cpu"):
        graph_processing.process(ei, 2, 2, torch.ones(2))
    with pytest.raises(ValueError, match=r"process_graph: edge_weight must have shape \(E=2,\)"):
        graph_processing.process(ei, 2, 2, torch.ones(3, device="cuda"))
