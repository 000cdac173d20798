"""The graph-processing stage on CPU: the dispatch equals the reference, the caching policy, stage routing and
launcher validation (without a GPU). tests/kernels/test_compile.py compiles the kernel sources with nvcc."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from graph.processing_cases import ALL_CASES, SQUARE_CASES, processing_graph

import graphfuse
import graphfuse.nn
from graphfuse.checks import is_finite_real
from graphfuse.graph import Graph, Stage, norm, processing
from graphfuse.kernels import gat_attention, graph_processing


def assert_same_graph(got: Graph, want: Graph) -> None:
    assert torch.equal(got.edge_index, want.edge_index)
    assert (got.edge_weight is None) == (want.edge_weight is None)
    if want.edge_weight is not None:
        assert got.edge_weight.dtype == want.edge_weight.dtype
        torch.testing.assert_close(got.edge_weight, want.edge_weight, rtol=1e-6, atol=0)
    for a, b in zip(got.csr, want.csr):
        assert torch.equal(a, b)
    for a, b in zip(got.csc, want.csc):
        assert torch.equal(a, b)
    assert torch.equal(got.csr_to_csc, want.csr_to_csc)


@pytest.mark.parametrize("name", SQUARE_CASES)
@pytest.mark.parametrize("weighted", [False, True])
def test_cpu_dispatch_is_the_reference(name, weighted):
    g = processing_graph(name, weighted)
    assert_same_graph(graphfuse.gcn_norm(g), norm.gcn_norm(g))
    assert_same_graph(graphfuse.graph.gcn_norm(g, improved=True), norm.gcn_norm(g, improved=True))
    assert_same_graph(graphfuse.graph.gcn_norm(g, add_self_loops=False), norm.gcn_norm(g, add_self_loops=False))
    assert_same_graph(graphfuse.graph.add_remaining_self_loops(g, 2.5), norm.add_remaining_self_loops(g, 2.5))
    assert_same_graph(graphfuse.mean_norm(g), norm.mean_norm(g))


@pytest.mark.parametrize("weighted", [False, True])
def test_process_graph_composes_the_reference(weighted):
    g = processing_graph("duplicates_loops", weighted)
    out = processing.process_graph(g, self_loops=True, fill_value=2.0, norm="gcn")
    assert_same_graph(out, norm.gcn_norm(g, improved=True))
    out = processing.process_graph(g, self_loops=True, norm="mean")
    assert_same_graph(out, norm.mean_norm(norm.add_remaining_self_loops(g)))
    assert processing.process_graph(g) is g


def test_mean_norm_of_in_weights_summing_to_zero_is_zero():
    """w / Σw gave NaN (0/0) or ±inf (x/0) on a target whose in-edge weights sum to 0 (a masked edge)."""
    g = Graph(torch.tensor([[0, 1, 2, 0, 1], [1, 2, 2, 0, 0]]), num_nodes=3,
              edge_weight=torch.tensor([0.0, 1.0, 1.0, 1.0, -1.0]))
    assert norm.mean_norm(g).edge_weight.tolist() == [0.0, 0.5, 0.5, 0.0, 0.0]
    assert graphfuse.mean_norm(g).edge_weight.tolist() == [0.0, 0.5, 0.5, 0.0, 0.0]


def test_bipartite_conversion_and_mean():
    g = processing_graph("bipartite", True)
    assert_same_graph(graphfuse.mean_norm(g), norm.mean_norm(g))
    assert processing.build_formats(g) is g
    with pytest.raises(ValueError, match="process_graph: self-loops need a square graph"):
        processing.process_graph(g, self_loops=True)
    with pytest.raises(ValueError, match="process_graph: norm='gcn' needs a square graph"):
        processing.process_graph(g, norm="gcn")
    for gcn_norm in (graphfuse.gcn_norm, norm.gcn_norm):  # not degrees of targets indexed by source ids
        with pytest.raises(ValueError, match=r"gcn_norm: graph must be square \(num_src == num_dst\)"):
            gcn_norm(g, add_self_loops=False)


def test_learned_edge_weights_are_processed_by_the_differentiable_reference_uncached():
    g = processing_graph("duplicates_loops", True)
    w = g.edge_weight.clone().requires_grad_()
    learned = Graph(g.edge_index, num_nodes=g.num_nodes, edge_weight=w)
    first = processing.process_gcn(learned)
    assert processing.process_gcn(learned) is not first  # the weights change every step: never cached
    assert_same_graph(first, norm.gcn_norm(g))
    first.edge_weight.sum().backward()
    assert w.grad is not None and w.grad.abs().sum() > 0
    assert processing.process_gat(learned) is not processing.process_gat(learned)
    assert processing.process_mean(learned) is not processing.process_mean(learned)
    with pytest.raises(ValueError, match="process_graph: the fused stage does not differentiate edge weights"):
        processing.process_graph(learned, norm="gcn", backend="fused")


def test_caching_policy_full_graph_once_batches_on_the_fly():
    g = processing_graph("isolated", False)
    first = processing.process_gcn(g)
    assert processing.process_gcn(g) is first  # full-graph training: built once, cached on the graph
    assert g.cached(("gcn_norm", True, False), lambda: None) is first  # GCNConv's key
    batch = Graph(g.edge_index[:, :50].clone(), num_nodes=g.num_nodes)  # a sampled batch: a new Graph
    assert_same_graph(processing.process_gcn(batch), norm.gcn_norm(batch))
    gat = processing.process_gat(g)
    assert processing.process_gat(g) is gat and g.cached(("add_remaining_self_loops", 1.0), lambda: None) is gat
    assert processing.process_gat(g, add_self_loops=False) is g
    assert processing.process_mean(g) is processing.process_mean(g)
    # each setting has its own cache entry: GCNConv(improved=True) must not get the A + I graph
    improved = processing.process_gcn(g, improved=True)
    assert improved is not first and processing.process_gcn(g, improved=True) is improved
    assert_same_graph(improved, norm.gcn_norm(g, improved=True))
    assert_same_graph(processing.process_gcn(g, add_self_loops=False), norm.gcn_norm(g, add_self_loops=False))



@pytest.mark.parametrize("change", ["in place", "replaced"])
@pytest.mark.parametrize("process", ["process_gcn", "process_gat", "process_mean"])
def test_processed_graph_follows_edge_weight_changes(change, process):
    """A cached normalisation kept the old weights after ``edge_weight`` changed, while ``aggregate`` (whose
    permuted weights track the version counter) used the new ones: GCNConv and aggregate disagreed."""
    g = processing_graph("isolated", True)
    build = getattr(processing, process)
    first = build(g)
    assert build(g) is first  # unchanged weights: still cached
    if change == "in place":
        g.edge_weight.mul_(3).add_(1)
    else:
        g.edge_weight = torch.rand_like(g.edge_weight)
    again = build(g)
    assert again is not first and build(g) is again
    assert_same_graph(again, build(Graph(g.edge_index, num_nodes=g.num_nodes, edge_weight=g.edge_weight.clone())))
    key = {"process_gcn": ("gcn_norm", True, False), "process_gat": ("add_remaining_self_loops", 1.0),
           "process_mean": ("mean_norm",)}[process]
    moved = g.to("meta")  # moved along with its weights while current: not rebuilt
    assert build(moved) is moved.cached(key, lambda: None) is not None
    g.edge_weight.add_(1)  # changed after the build, before another process call: not moved along
    assert key not in g.to("meta")._cache
    import pickle  # the stamps pickle (a weakref did not)
    again = pickle.loads(pickle.dumps(g))
    assert_same_graph(build(again), build(g))


@pytest.mark.parametrize("process", ["process_gcn", "process_gat", "process_mean"])
def test_processed_graph_follows_weights_being_set_or_removed(process):
    """Without weights the cache kept no stamp: setting edge_weight later kept the unweighted result."""
    g = processing_graph("isolated", False)
    build = getattr(processing, process)
    plain = build(g)
    g.edge_weight = torch.rand(g.num_edges)
    weighted = build(g)
    assert weighted is not plain
    assert_same_graph(weighted, build(Graph(g.edge_index, num_nodes=g.num_nodes, edge_weight=g.edge_weight)))
    g.edge_weight = None
    assert_same_graph(build(g), build(Graph(g.edge_index, num_nodes=g.num_nodes)))

def test_processed_graph_moves_between_devices():
    g = processing_graph("isolated", True)
    processing.build_formats(g)
    processing.process_gcn(g)
    moved = g.to("meta")  # any other device: the cache (formats, processed graphs, markers) moves along
    assert moved.device.type == "meta" and moved.csr.rowptr.device.type == "meta"
    assert moved.cached(("gcn_norm", True, False), lambda: None).device.type == "meta"


def test_gcnconv_uses_the_same_cached_graph():
    g = processing_graph("isolated", False)
    conv = graphfuse.nn.GCNConv(3, 2)
    conv(torch.randn(g.num_nodes, 3), g)
    assert g.cached(("gcn_norm", True, False), lambda: None) is processing.process_gcn(g)


def test_registered_stage_routing(monkeypatch):
    calls = []

    def fake(graph, self_loops, fill_value, norm_name):
        calls.append((self_loops, fill_value, norm_name))
        return processing._reference(graph, self_loops, fill_value, norm_name)

    g = processing_graph("isolated", True)
    monkeypatch.setitem(processing._STAGES, "cpu", Stage(run=fake, is_available=lambda: True))
    assert_same_graph(processing.gcn_norm(g, improved=True), norm.gcn_norm(g, improved=True))
    processing.add_remaining_self_loops(g, 3.0)
    processing.mean_norm(g)
    assert calls == [(True, 2.0, "gcn"), (True, 3.0, "none"), (False, 1.0, "mean")]
    processing.gcn_norm(g, backend="reference")
    assert len(calls) == 3
    monkeypatch.setitem(processing._STAGES, "cpu", Stage(run=fake, is_available=lambda: False))
    processing.gcn_norm(g)
    assert len(calls) == 3
    with pytest.raises(ValueError, match="gcn_norm: no fused graph-processing stage runs on cpu graphs"):
        processing.gcn_norm(g, backend="fused")
    monkeypatch.setitem(processing._STAGES, "cpu", Stage(run=fake, is_available=lambda: True))
    half = Graph(g.edge_index, num_nodes=g.num_nodes, edge_weight=g.edge_weight.half())
    processing.gcn_norm(half)  # a dtype the fused stage refuses: the reference under "auto"
    assert len(calls) == 3
    with pytest.raises(TypeError, match="gcn_norm: the fused stage takes float32/float64 edge weights"):
        processing.gcn_norm(half, backend="fused")


def test_dispatch_validation():
    g = processing_graph("isolated", False)
    with pytest.raises(ValueError, match="backend must be one of"):
        processing.gcn_norm(g, backend="gespmm")
    with pytest.raises(TypeError, match="gcn_norm: graph must be a graphfuse.Graph"):
        processing.gcn_norm(g.edge_index)
    with pytest.raises(ValueError, match="norm must be one of"):
        processing.process_graph(g, norm="sym")
    with pytest.raises(ValueError, match="no fused graph-processing stage runs on cpu"):
        processing.process_graph(g, backend="fused")


def test_switches_fill_values_and_cached_calls_are_checked():
    """String switches were truthy ('no' added self-loops), a str or NaN fill_value failed inside torch or was
    taken, and a process_* call that hit the cache skipped the checks of its backend and graph arguments."""
    g = processing_graph("isolated", False)
    with pytest.raises(TypeError, match="gcn_norm: add_self_loops must be a bool; got 'no'"):
        processing.gcn_norm(g, add_self_loops="no")
    with pytest.raises(TypeError, match="process_graph: self_loops must be a bool"):
        processing.process_graph(g, self_loops=1)
    with pytest.raises(TypeError, match="process_gcn: improved must be a bool"):
        processing.process_gcn(g, improved="false")
    with pytest.raises(TypeError, match="process_gat: add_self_loops must be a bool"):
        processing.process_gat(g, add_self_loops=None)
    for bad in ("1", float("nan"), float("inf"), True):
        error, what = (ValueError, "a finite real number") if isinstance(bad, float) else (TypeError, "a real number")
        with pytest.raises(error, match=f"add_remaining_self_loops: fill_value must be {what}; got {bad!r}"):
            processing.add_remaining_self_loops(g, bad)
        with pytest.raises(error, match=f"process_graph: fill_value must be {what}; got {bad!r}"):
            processing.process_graph(g, self_loops=True, fill_value=bad)
    processing.process_gcn(g)
    processing.process_mean(g)
    processing.process_gat(g)
    processing.build_formats(g)
    for name in ("process_gcn", "process_mean", "process_gat", "build_formats"):  # cache hits
        with pytest.raises(ValueError, match=f"{name}: backend must be one of"):
            getattr(processing, name)(g, backend="bogus")
        with pytest.raises(TypeError, match=f"{name}: graph must be a graphfuse.Graph"):
            getattr(processing, name)(g.edge_index)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(edge_index=torch.zeros(2, 3, dtype=torch.int32)), TypeError, "edge_index must have dtype torch.int64"),
        (dict(edge_index=torch.zeros(3, 3, dtype=torch.int64)), ValueError, r"edge_index must have shape \(2, E\)"),
        (dict(edge_index=torch.zeros(3, 2, dtype=torch.int64).t()), ValueError, "edge_index must be contiguous"),
        (dict(edge_weight=torch.ones(4)), ValueError, r"edge_weight must have shape \(E=3,\)"),
        (dict(edge_weight=torch.ones(3, dtype=torch.float16)), TypeError, "edge_weight must have dtype"),
        (dict(num_src=-1), ValueError, "num_src must be a non-negative int"),
        (dict(num_src=4, self_loops=True), ValueError, "self-loops and GCN normalisation need a square graph"),
        (dict(norm="sym"), ValueError, "norm must be one of"),
        (dict(), ValueError, "edge_index must be a CUDA tensor; got a tensor on cpu"),
    ],
)
def test_process_launcher_validation(kwargs, error, match):
    args = dict(edge_index=torch.zeros(2, 3, dtype=torch.int64), num_src=5, num_dst=5, edge_weight=None)
    args.update({k: v for k, v in kwargs.items() if k in args})
    extra = {k: v for k, v in kwargs.items() if k not in args}
    with pytest.raises(error, match=f"process_graph: {match}"):
        graph_processing.process(args["edge_index"], args["num_src"], args["num_dst"], args["edge_weight"], **extra)



@pytest.mark.parametrize("upper, num_src, num_dst, dtype", [
    (600, 2**30 + 1000, 2**30 + 1000, torch.int64),  # the long-column id num_dst + s passes 2**31 (it wrapped)
    (600, 2**30 - 1000, 2**30 - 1000, torch.int32),
    (2**31 - 2, 0, 1, torch.int64),
    (10, 5, 7, torch.int32),
])
def test_workspace_int32_only_when_segment_ids_fit(upper, num_src, num_dst, dtype):
    """gp_scatter lists long segments by id in [0, num_dst + num_src); the int32 choice once bounded only
    max(num_src, num_dst), so a >2**30-node graph's long CSC column got a negative id that gp_sort then used."""
    assert graph_processing.workspace_dtype(upper, num_src, num_dst) == dtype

def _csr_cpu(n=4):
    rowptr = torch.tensor([0, 2, 3, 5, 6])
    col32 = torch.tensor([0, 1, 2, 3, 0, 1], dtype=torch.int32)
    perm = torch.arange(6)
    return rowptr, col32, perm


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(a_src=torch.zeros(4, 2, dtype=torch.int32)), TypeError, "gat_softmax: a_src must have dtype"),
        (dict(a_dst=torch.zeros(4, 3)), ValueError, r"gat_softmax: a_dst must have shape \(N_dst, H=2\)"),
        (dict(a_dst=torch.zeros(4, 2, dtype=torch.float64)), TypeError, "gat_softmax: a_dst must have dtype"),
        (dict(rowptr=torch.tensor([0, 6])), ValueError, r"gat_softmax: rowptr must have shape \(N_dst=4 \+ 1,\)"),
        (dict(col32=torch.zeros(6, dtype=torch.int64)), TypeError, "gat_softmax: col32 must have dtype torch.int32"),
        (dict(perm=torch.arange(5)), ValueError, r"gat_softmax: perm must have shape \(E=6,\)"),
        (dict(dropout=1.0), ValueError, r"gat_softmax: dropout must lie in \[0, 1\)"),
        (dict(seed=2**63), ValueError, r"gat_softmax: seed must be an int in \[-2\*\*63, 2\*\*63\)"),
        (dict(seed=1.5), ValueError, "gat_softmax: seed must be an int"),
        (dict(seed=np.int64(2**63 - 1), dropout=0.5), ValueError, "rowptr must be a CUDA tensor"),  # NumPy: taken
        (dict(), ValueError, "gat_softmax: rowptr must be a CUDA tensor; got a tensor on cpu"),
    ],
)
def test_gat_launcher_validation(kwargs, error, match):
    rowptr, col32, perm = _csr_cpu()
    args = dict(rowptr=rowptr, col32=col32, perm=perm, a_src=torch.zeros(4, 2), a_dst=torch.zeros(4, 2))
    args.update({k: v for k, v in kwargs.items() if k in args})
    extra = {k: v for k, v in kwargs.items() if k not in args}
    with pytest.raises(error, match=match):
        gat_attention.softmax_forward(args["rowptr"], args["col32"], args["perm"], args["a_src"], args["a_dst"],
                                      **extra)


def test_gat_backward_launcher_validation():
    rowptr, col32, perm = _csr_cpu()
    a = torch.zeros(4, 2)
    with pytest.raises(ValueError, match=r"gat_softmax_backward: dalpha must have shape \(E=6, H=2\)"):
        gat_attention.softmax_backward(rowptr, col32, perm, rowptr, col32, perm, torch.zeros(6, 3), None, perm,
                                       a, a, a, a)


def test_cases_cover_the_hard_parts():
    g = processing_graph("giant_hub", False)
    assert int(g.in_degree.max()) > graph_processing.BLOCK_CAP
    assert int(g.out_degree.max()) > graph_processing.WARP_CAP
    loops = processing_graph("duplicates_loops", False).edge_index
    assert int((loops[0] == loops[1]).sum()) > 30
    assert {c for c in ALL_CASES} >= {"bipartite", "empty"}


def test_gat_launchers_refuse_index_values_out_of_range(monkeypatch):
    """Shapes were checked but not values: a source id past a_src's rows or a repeated COO id reached the kernels
    (an out-of-bounds read, or alpha slots left unwritten). CPU tensors stand in for CUDA ones."""
    from graphfuse.kernels import runtime

    monkeypatch.setattr(runtime, "check_devices", lambda op, tensors: torch.device("cpu"))
    rowptr, col32, perm = _csr_cpu()
    a = torch.zeros(4, 2)
    far = col32.clone()
    far[2] = 4
    with pytest.raises(ValueError, match=r"gat_softmax: col32 must hold values in \[0, 4\)"):
        gat_attention.softmax_forward(rowptr, far, perm, a, a)
    with pytest.raises(ValueError, match=r"gat_softmax: perm must be a permutation of \[0, 6\)"):
        gat_attention.softmax_forward(rowptr, col32, torch.tensor([0, 1, 1, 3, 4, 5]), a, a)
    with pytest.raises(ValueError, match=r"gat_alpha_entries: dst32 must hold values in \[0, 4\)"):
        gat_attention.alpha_entries(col32.long(), far, perm, a, a, a, a)
    with pytest.raises(ValueError, match=r"gat_softmax_backward: cpos must hold values in \[0, 6\)"):
        gat_attention.softmax_backward(rowptr, col32, perm, rowptr, col32, perm, torch.zeros(6, 2), None, perm + 1,
                                       a, a, a, a)
    with pytest.raises(ValueError, match=r"gat_softmax_backward: row32 must hold values in \[0, 4\)"):
        gat_attention.softmax_backward(rowptr, col32, perm, rowptr, far, perm, torch.zeros(6, 2), None, perm,
                                       a, a, a, a)


@pytest.mark.parametrize("process", ["process_gcn", "process_gat", "process_mean"])
def test_explicit_fused_is_refused_also_after_a_cached_reference_build(process):
    """The cache key leaves out the backend: backend='fused' where no fused stage runs (CPU) was refused on a
    fresh graph but served the reference's cached result after a reference build (found by review)."""
    g = processing_graph("isolated", True)
    build = getattr(processing, process)
    build(g, backend="reference")
    with pytest.raises(ValueError, match="no fused graph-processing stage runs on cpu"):
        build(g, backend="fused")


def test_formats_and_loopless_gat_refuse_fused_also_after_a_cached_build():
    """build_formats and process_gat(add_self_loops=False) served their cache marker to backend='fused' on CPU
    after an earlier build, and process_gat's errors named build_formats (found by review)."""
    g = processing_graph("isolated", True)
    processing.build_formats(g)
    for call, op in ((lambda: processing.build_formats(g, backend="fused"), "build_formats"),
                     (lambda: processing.process_gat(g, add_self_loops=False, backend="fused"), "process_gat")):
        with pytest.raises(ValueError, match=f"{op}: no fused graph-processing stage runs on cpu"):
            call()
    with pytest.raises(TypeError, match="process_gat: graph must be a graphfuse.Graph"):
        processing.process_gat(g.edge_index, add_self_loops=False)


def test_a_fill_value_the_weights_dtype_cannot_hold_is_refused():
    g = processing_graph("isolated", True)
    half = Graph(g.edge_index, num_nodes=g.num_nodes, edge_weight=g.edge_weight.half())
    with pytest.raises(ValueError, match="add_remaining_self_loops: fill_value must fit the edge weights' "
                       "torch.float16; got 100000.0"):
        processing.add_remaining_self_loops(half, 1e5)  # a bare overflow RuntimeError before (review)
    assert processing.add_remaining_self_loops(half, 6e4).edge_weight.dtype == torch.float16


def test_unweighted_graphs_under_a_half_default_dtype_do_not_reach_the_fused_stage(monkeypatch):
    """Its values come in the default dtype, which the fused stage cannot make in float16 (a TypeError about
    value_dtype, an argument nobody passed; found by review). A fake stage stands in for CUDA's."""
    calls = []
    monkeypatch.setitem(processing._STAGES, "cpu", Stage(run=lambda *a: calls.append(a), is_available=lambda: True))
    g = processing_graph("isolated", False)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float16)
    try:
        assert processing.gcn_norm(g).edge_weight.dtype == torch.float16 and calls == []
        with pytest.raises(TypeError, match=r"gcn_norm: the fused stage takes float32/float64 values \(the default"):
            processing.gcn_norm(g, backend="fused")
    finally:
        torch.set_default_dtype(previous)


def test_process_graph_gcn_without_self_loops_adds_none():
    g = Graph(torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]]), num_nodes=4)
    out = processing.process_graph(g, norm="gcn", backend="reference")
    expected = norm.gcn_norm(g, add_self_loops=False)
    assert out.num_edges == g.num_edges
    assert torch.equal(out.edge_index, expected.edge_index)
    torch.testing.assert_close(out.edge_weight, expected.edge_weight)


def test_minus_infinity_is_no_fill_value():
    assert not is_finite_real(-math.inf)
    assert not is_finite_real(np.float64("-inf"))
    g = Graph(torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    with pytest.raises(ValueError, match="fill_value must be a finite real number"):
        processing.process_graph(g, self_loops=True, fill_value=-math.inf)


def test_a_backend_that_is_no_name_gets_a_type_error():
    g = Graph(torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    with pytest.raises(TypeError, match="process_graph: backend must be a backend name \\(str\\); got int"):
        processing.process_graph(g, backend=1)


def test_to_dense_and_register_stage_check_their_arguments():
    """to_dense(edge_index) raised AttributeError "'Tensor' object has no attribute 'edge_weight'", and
    register_stage took any object, failing only at the next gcn_norm (found by review)."""
    with pytest.raises(TypeError, match="to_dense: graph must be a graphfuse.Graph; got Tensor"):
        norm.to_dense(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="register_stage: stage must be a graphfuse Stage; got str"):
        processing.register_stage("cpu", "not a Stage")
    with pytest.raises(TypeError, match="register_stage: device_type must be a device type"):
        processing.register_stage(None, Stage(run=lambda *a: None, is_available=lambda: False))
    assert "cpu" not in processing._STAGES
