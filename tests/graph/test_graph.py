"""Graph construction, validation, cached formats, conversion, and the reference normalisation."""

import pickle

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.nn.conv.gcn_conv import gcn_norm as pyg_gcn_norm

import graphfuse
from cases import GRAPH_CASES, make_graph_case, tolerance, torch_row_schedule
from graphfuse import Graph, aggregate
from graphfuse.graph import (
    add_remaining_self_loops,
    coo_to_csc,
    coo_to_csr,
    gcn_norm,
    mean_norm,
    process_gcn,
    ptr_to_index,
    to_dense,
)


def test_csr_csc_match_dense(device):
    for name in GRAPH_CASES:
        g = make_graph_case(name, device)
        dense = to_dense(g)
        rowptr, col, perm, row = g.csr
        rebuilt = torch.zeros_like(dense).index_put_((row, col), torch.ones(g.num_edges, dtype=dense.dtype,
                                                                             device=device), accumulate=True)
        assert torch.equal(rebuilt, dense), name
        assert torch.equal(g.edge_index[:, perm], torch.stack([col, row])), name
        colptr, crow, cperm, ccol = g.csc
        assert torch.equal(g.edge_index[:, cperm], torch.stack([ccol, crow])), name
        assert torch.equal(rowptr.diff(), torch.bincount(g.edge_index[1], minlength=g.num_dst)), name
        assert torch.equal(colptr.diff(), torch.bincount(g.edge_index[0], minlength=g.num_src)), name
        assert torch.equal(colptr.diff(), g.out_degree) and torch.equal(rowptr.diff(), g.in_degree)
        assert torch.equal(row, ptr_to_index(rowptr)) and torch.equal(ccol, ptr_to_index(colptr)), name
        # csr_to_csc maps CSR-ordered values onto CSC order
        assert torch.equal(perm[g.csr_to_csc], cperm), name


def test_csr_is_stable_within_rows():
    ei = torch.tensor([[3, 1, 2, 0, 1], [1, 0, 1, 0, 1]])
    rowptr, col, perm = coo_to_csr(ei, 2)
    assert rowptr.tolist() == [0, 2, 5]
    assert perm.tolist() == [1, 3, 0, 2, 4]
    assert col.tolist() == [1, 0, 3, 2, 1]


def test_formats_are_cached():
    g = make_graph_case("unsorted")
    assert g.csr is g.csr and g.csc is g.csc and g.csr_to_csc is g.csr_to_csc
    calls = []
    assert g.cached("k", lambda: calls.append(1) or 5) == 5 and g.cached("k", lambda: calls.append(1) or 6) == 5
    assert calls == [1]


def test_to_same_device_keeps_cache():
    g = make_graph_case("hub")
    csr = g.csr
    assert g.to("cpu") is g and g.csr is csr


def test_to_moves_formats_and_leaves_device_bound_caches_behind():
    """A graph that has been aggregated on (row schedule with an int field, a plan dict, a normalised graph
    cached on it) moves to another device: formats move, kernel-side objects stay behind to be rebuilt."""
    from graphfuse.kernels.spmm import RowSchedule

    src = torch.arange(1, 200)
    g = Graph(torch.stack([src, torch.zeros_like(src)]), num_nodes=200)
    # a row schedule, as GE-SpMM caches it (tensors and ints; built by kernels on a GPU, here by the oracle)
    g.cached(("kernels", "schedule", "csr", 32), lambda: RowSchedule(*torch_row_schedule(g.csr.rowptr, 32)))
    aggregate(g, torch.randn(200, 3))  # fills the dispatch memo (a dict)
    g.cached("derived", lambda: Graph(g.edge_index.flip(0), num_nodes=200))  # e.g. a normalised graph
    moved = g.to("meta")
    assert moved.csr.rowptr.device.type == "meta" and moved.in_degree.device.type == "meta"
    assert moved.cached("derived", lambda: None).device.type == "meta"
    assert ("kernels", "schedule", "csr", 32) not in moved._cache and "dispatch" not in moved._cache


@pytest.mark.gpu
def test_to_cuda_moves_cached_formats():
    g = make_graph_case("hub")
    _ = g.csr
    gc = g.to("cuda")
    assert gc.device.type == "cuda" and gc.csr.rowptr.device.type == "cuda"
    assert torch.equal(gc.csr.col.cpu(), g.csr.col)


def test_num_nodes_inferred_and_bipartite():
    g = Graph(torch.tensor([[0, 4], [1, 2]]))
    assert g.num_nodes == 5 and g.num_edges == 2 and not g.is_bipartite
    b = Graph(torch.tensor([[0, 4], [1, 0]]), num_src=5, num_dst=2)
    assert b.is_bipartite and b.csr.rowptr.tolist() == [0, 1, 2] and b.csc.colptr.numel() == 6
    with pytest.raises(ValueError, match="bipartite"):
        _ = b.num_nodes


@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        (dict(edge_index=torch.tensor([[0, 1], [1, 0]], dtype=torch.float32)), TypeError, "integer dtype"),
        (dict(edge_index=torch.tensor([0, 1, 2])), ValueError, r"shape \(2, E\); got \(3,\)"),
        (dict(edge_index=torch.zeros(3, 2, dtype=torch.long)), ValueError, r"shape \(2, E\)"),
        (dict(edge_index=torch.tensor([[0, 5], [1, 0]]), num_nodes=3), ValueError, r"source .* \[0, 3\); got .*\[0, 5\]"),
        (dict(edge_index=torch.tensor([[0, 1], [-1, 0]]), num_nodes=3), ValueError, r"target .*got values in \[-1, 0\]"),
        (dict(edge_index=torch.tensor([[0, 1], [1, 0]]), edge_weight=torch.ones(3)), ValueError, r"edge_weight .*\(E=2,\)"),
        (dict(edge_index=torch.tensor([[0, 1], [1, 0]]), edge_weight=torch.ones(2, dtype=torch.long)), TypeError,
         "edge_weight must be a floating-point"),
        (dict(edge_index=[[0, 1], [1, 0]]), TypeError, "edge_index must be a torch.Tensor"),
        (dict(edge_index=torch.tensor([[0], [0]]), num_nodes=-1), ValueError, "num_nodes must be a non-negative int; got -1"),
        (dict(edge_index=torch.tensor([[0], [0]]), num_nodes=3.0), ValueError, "num_nodes must be a non-negative int"),
        (dict(edge_index=torch.tensor([[0], [0]]), num_src=2), ValueError, "go together"),
    ],
)
def test_validation_errors(kwargs, error, pattern):
    with pytest.raises(error, match=pattern):
        Graph(**kwargs)


def test_pyg_round_trip():
    data = Data(edge_index=torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=4, edge_weight=torch.rand(3))
    g = Graph.from_pyg(data)
    assert g.num_nodes == 4 and torch.equal(g.edge_weight, data.edge_weight)
    back = g.to_pyg()
    assert back.num_nodes == 4 and torch.equal(back.edge_index, data.edge_index)
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    weights = Graph.from_pyg(Data(edge_index=edge_index, num_nodes=3, edge_attr=torch.rand(3)))
    assert weights.edge_weight is not None  # a 1-D float edge_attr is a weight
    types = Graph.from_pyg(Data(edge_index=edge_index, num_nodes=3, edge_attr=torch.tensor([0, 2, 1])))
    assert types.edge_weight is None  # edge types are not weights (this raised, naming edge_weight)
    block = Graph(torch.tensor([[0, 1, 2], [1, 1, 0]]), num_src=3, num_dst=2)
    with pytest.raises(ValueError, match="to_pyg: a Data holds one node set, and this graph is a bipartite block"):
        block.to_pyg()  # was "num_nodes is undefined ...; use num_src / num_dst", which to_pyg's caller cannot do


@pytest.mark.parametrize("weighted, improved", [(False, False), (True, False), (True, True)])
def test_gcn_norm_matches_pyg(weighted, improved):
    gen = torch.Generator().manual_seed(1)
    ei = torch.randint(0, 40, (2, 200), generator=gen)
    ei[:, :5] = torch.arange(5).expand(2, 5)  # some existing self-loops
    w = torch.rand(200, generator=gen, dtype=torch.float64) if weighted else None
    g = gcn_norm(Graph(ei, num_nodes=45, edge_weight=w), improved=improved)
    ref_ei, ref_w = pyg_gcn_norm(ei, w, num_nodes=45, improved=improved, add_self_loops=True,
                                 dtype=torch.float64 if weighted else torch.float32)
    assert torch.allclose(to_dense(g), to_dense(Graph(ref_ei, num_nodes=45, edge_weight=ref_w)))


def test_gcn_norm_improved_unweighted_fills_2_where_there_is_no_loop():
    # PyG 2.8 drops improved=True on unweighted graphs (its loops get weight 1); ours fills 2 there too, and a
    # node that had a self-loop keeps it with weight 1 (add_remaining_self_loops), as PyG's weighted case does.
    ei = torch.tensor([[0, 1, 1, 1], [0, 0, 1, 2]])
    dense = to_dense(gcn_norm(Graph(ei, num_nodes=3), improved=True))
    a_hat = to_dense(Graph(ei, num_nodes=3)) + torch.diag(torch.tensor([0.0, 0.0, 2.0], dtype=torch.float64))
    d = a_hat.sum(1).pow(-0.5)
    torch.testing.assert_close(dense, d[:, None] * a_hat * d[None, :])


def test_self_loops_replaced_once_per_node():
    g = Graph(torch.tensor([[0, 0, 1, 2], [0, 0, 2, 1]]), num_nodes=3, edge_weight=torch.tensor([3.0, 5.0, 1.0, 1.0]))
    looped = add_remaining_self_loops(g)
    dense = to_dense(looped)
    assert dense.diagonal().tolist() == [5.0, 1.0, 1.0] and looped.num_edges == 5


def test_mean_norm_rows_sum_to_one():
    g = mean_norm(make_graph_case("isolated"))
    row_sums = to_dense(g).sum(1)
    has_edges = g.in_degree > 0
    assert torch.allclose(row_sums[has_edges], torch.ones_like(row_sums[has_edges]))
    assert (row_sums[~has_edges] == 0).all()


def test_csc_columns_list_their_edges_in_csr_order():
    """A CSC column is ordered by target, then COO position: the CSR's entries stably sorted by source."""
    ei = torch.tensor([[2, 0, 2, 1, 2, 0], [1, 2, 0, 2, 1, 1]])
    g = Graph(ei, num_nodes=3)
    colptr, row, perm, col = g.csc
    assert perm.tolist() == [5, 1, 3, 2, 0, 4]
    assert row.tolist() == [1, 2, 2, 0, 1, 1] and col.tolist() == [0, 0, 1, 2, 2, 2]
    assert torch.equal(g.csr_to_csc, torch.sort(g.csr.col, stable=True).indices)


def test_exported_conversions_check_their_input():
    """coo_to_csr of an id past num_dst returned a longer rowptr without an error; negative ids failed in
    bincount, a decreasing ptr in repeat_interleave."""
    for past in (3, 5):  # the first id past the end too (mutation audit)
        with pytest.raises(ValueError, match=r"coo_to_csr: edge_index ids must be >= 0 and row 1 below num_dst=3"):
            coo_to_csr(torch.tensor([[0], [past]]), 3)
    with pytest.raises(ValueError, match=r"target \(edge_index\[1\]\) indices must lie in \[0, 3\)"):
        Graph(torch.tensor([[0], [3]]), num_nodes=3)  # the kernels' only guard: the engine skips validation
    with pytest.raises(ValueError, match=r"coo_to_csc: edge_index ids must be >= 0 and row 0 below num_src=3"):
        coo_to_csc(torch.tensor([[-1], [0]]), 3)
    with pytest.raises(TypeError, match="coo_to_csr: edge_index must be an int64 or int32 tensor"):
        coo_to_csr(torch.tensor([[0.0], [1.0]]), 3)
    with pytest.raises(ValueError, match=r"coo_to_csc: edge_index must have shape \(2, E\)"):
        coo_to_csc(torch.tensor([0, 1]), 3)
    with pytest.raises(ValueError, match="ptr_to_index: ptr must be non-decreasing"):
        ptr_to_index(torch.tensor([0, 3, 1]))
    assert torch.equal(coo_to_csr(torch.tensor([[0, 1], [1, 2]]), 3)[0], torch.tensor([0, 0, 1, 2]))
    assert torch.equal(ptr_to_index(torch.tensor([0, 2, 2, 3])), torch.tensor([0, 0, 2]))


def test_node_ids_sort_stably_as_int32_and_int64():
    """Graph's formats sort node ids as int32 when they fit (half the radix passes); the order, the sorted ids
    and their dtype are those of the int64 sort."""
    from graphfuse.graph.convert import _sort_ids

    ids = torch.randint(0, 50, (500,), generator=torch.Generator().manual_seed(0))
    want = torch.sort(ids, stable=True)
    for size in (50, 1 << 31):  # int32 keys; too many nodes for them
        keys, perm = _sort_ids(ids, size)
        assert keys.dtype == torch.int64 and torch.equal(keys, want.values) and torch.equal(perm, want.indices)


@pytest.mark.parametrize("normalise", [lambda g: gcn_norm(g, add_self_loops=False), mean_norm])
def test_learned_weights_of_a_target_summing_to_zero_get_finite_gradients(normalise):
    """The forward gave those edges 0, but the backward made 0 · inf = NaN (PyG's gcn_norm does too), which
    poisoned every weight through the optimiser."""
    ei = torch.tensor([[0, 1, 2, 0], [1, 2, 0, 0]])
    w = torch.tensor([1.0, 0.0, 1.0, 2.0], dtype=torch.float64, requires_grad=True)
    out = normalise(Graph(ei, num_nodes=3, edge_weight=w)).edge_weight
    assert out[1] == 0 and torch.isfinite(out).all()
    (out * torch.arange(1.0, 5.0, dtype=torch.float64)).sum().backward()
    assert torch.isfinite(w.grad).all() and w.grad[1] == 0
    keep = torch.tensor([0, 2, 3])  # away from the empty target the gradient is the exact one
    torch.autograd.gradcheck(lambda v: normalise(Graph(ei[:, keep], num_nodes=3, edge_weight=v)).edge_weight,
                             (w.detach()[keep].clone().requires_grad_(),))


def test_duplicate_self_loops_keep_the_last_weight_and_its_gradient():
    """An index_put with a repeated node kept one duplicate's weight but sent the gradient to all of them
    (gradcheck failed, as it does for PyG's add_remaining_self_loops)."""
    ei = torch.tensor([[0, 2, 1, 2, 2, 1], [1, 2, 0, 2, 0, 1]])
    w = torch.tensor([1.0, 0.3, 2.0, 0.7, 4.0, 5.0], dtype=torch.float64, requires_grad=True)
    looped = add_remaining_self_loops(Graph(ei, num_nodes=3, edge_weight=w), 9.0)
    assert looped.edge_index.tolist() == [[0, 1, 2, 0, 1, 2], [1, 0, 0, 0, 1, 2]]
    assert looped.edge_weight.tolist() == [1.0, 2.0, 4.0, 9.0, 5.0, 0.7]
    torch.autograd.gradcheck(lambda v: add_remaining_self_loops(Graph(ei, num_nodes=3, edge_weight=v)).edge_weight,
                             (w,))
    torch.autograd.gradcheck(lambda v: gcn_norm(Graph(ei, num_nodes=3, edge_weight=v)).edge_weight, (w,))


@pytest.mark.parametrize("copy_graph", ["pickle", "deepcopy"])
@pytest.mark.parametrize("stale_before_copy", [True, False])
def test_a_copied_graph_never_serves_a_stale_processed_graph(copy_graph, stale_before_copy):
    """A pickled tensor's version counter starts afresh, so a stamp copied along compared equal by chance: an entry
    already stale at the copy, or one current then and changed once after it, was served (found by review)."""
    import copy
    import pickle

    copy_of = {"pickle": lambda h: pickle.loads(pickle.dumps(h)), "deepcopy": copy.deepcopy}[copy_graph]
    g = Graph(torch.tensor([[0, 1, 2, 2], [1, 2, 0, 0]]), num_nodes=3, edge_weight=torch.tensor([1.0, 2, 3, 4]))
    for _ in range(1 if stale_before_copy else 2):  # the versions at which a loaded copy's counter (1) met the stamp
        g.edge_weight.add_(0)
    process_gcn(g)
    if stale_before_copy:
        g.edge_weight.mul_(10)
    h = copy_of(g)
    if not stale_before_copy:
        assert ("gcn_norm", True, False) in h._cache  # current at the copy: kept
        h.edge_weight.mul_(10)
    torch.testing.assert_close(process_gcn(h).edge_weight, gcn_norm(h).edge_weight)


@pytest.mark.parametrize("copy_graph", ["pickle", "deepcopy", "copy"])
def test_a_graph_whose_edges_changed_in_place_is_not_copied_with_its_old_caches(copy_graph):
    """The graph refused the change at its next use, but a copy's fresh version counter hid it: the copy served the
    CSR and the GCN normalisation of the old edges (found by review)."""
    import copy

    copy_of = {"pickle": lambda h: pickle.loads(pickle.dumps(h)), "deepcopy": copy.deepcopy, "copy": copy.copy}
    edge_index = torch.tensor([[1, 2], [0, 0]])
    g = Graph(edge_index, num_nodes=3)
    g.csr, process_gcn(g)
    copy_of[copy_graph](g)  # unchanged: copied
    edge_index[1, 1] = 1
    with pytest.raises(ValueError, match="edge_index was changed in place after the graph was built"):
        copy_of[copy_graph](g)


def test_a_plain_tuple_cached_on_a_graph_moves_as_that_tuple():
    """Graph.to rebuilt every cached tuple as a NamedTuple is (fields as arguments): a plain 2-tuple raised, a
    1-tuple of a tensor became a tuple of its rows (found by review)."""
    g = Graph(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)
    pair, single = (torch.arange(3), torch.ones(3)), (torch.arange(3),)
    g.cached("pair", lambda: pair), g.cached("single", lambda: single)
    moved = g.to("meta")
    for key, value in (("pair", pair), ("single", single)):
        got = moved.cached(key, lambda: None)
        assert type(got) is tuple and [t.shape for t in got] == [t.shape for t in value]
        assert all(t.device.type == "meta" for t in got)
    assert type(moved.csr) is type(g.csr)


def test_a_pickled_graph_leaves_its_dispatch_memo_and_plans_behind():
    """The engine's per-graph memo holds this process's backend choices (closures, registry generations): a
    graph with one could not be pickled when a backend's op was a local function (found by review)."""
    import pickle

    from graphfuse.engine import dispatcher

    def make_op():
        def op(graph, x, edge_weight, reduce):
            return aggregate(graph, x, edge_weight, reduce, backend="reference")
        return op

    dispatcher.register_backend(dispatcher.Backend("local_test", {"aggregate": make_op()}, frozenset({"cpu"})))
    try:
        g = make_graph_case("hub")
        aggregate(g, torch.rand(g.num_src, 3), backend="local_test")
        g.csr  # noqa: B018 - a format, which is kept
        assert "dispatch" in g._cache
        again = pickle.loads(pickle.dumps(g))
    finally:
        dispatcher.unregister_backend("local_test")
    assert "dispatch" not in again._cache and "csr" in again._cache


def test_setting_edge_weight_is_checked():
    """edge_weight may be set (the caches follow); it was not checked, so a (1,) tensor was broadcast to every
    edge and integer or (E, 2) weights were taken (found by review)."""
    g = make_graph_case("hub")
    for bad, error, match in [(torch.ones(1), ValueError, r"shape \(E=\d+,\)"),
                              (torch.ones(g.num_edges, 2), ValueError, "shape"),
                              (torch.ones(g.num_edges, dtype=torch.long), TypeError, "floating-point"),
                              ([1.0] * g.num_edges, TypeError, "floating-point"),
                              (torch.ones(g.num_edges, device="meta"), ValueError, "is on meta")]:
        with pytest.raises(error, match=match):
            g.edge_weight = bad
        assert g.edge_weight is None
    g.edge_weight = w = torch.rand(g.num_edges)
    assert g.edge_weight is w


def test_weighted_cache_entries_follow_the_weights_and_pickle():
    """Graph.cached(weighted=True): rebuilt after edge_weight is replaced, set, removed or changed in place;
    moved by Graph.to only while current; picklable (the engine's permuted weights kept a weakref that was not)."""
    import pickle

    from graphfuse.engine import autograd

    g = make_graph_case("hub")
    builds = []

    def build():
        builds.append(1)
        return None if g.edge_weight is None else g.edge_weight * 2

    assert g.cached("w2", build, weighted=True) is None and g.cached("w2", build, weighted=True) is None
    g.edge_weight = torch.rand(g.num_edges)
    first = g.cached("w2", build, weighted=True)
    assert torch.equal(first, g.edge_weight * 2) and g.cached("w2", build, weighted=True) is first
    g.edge_weight.add_(1)
    assert torch.equal(g.cached("w2", build, weighted=True), g.edge_weight * 2) and len(builds) == 3
    assert "w2" in g.to("meta")._cache
    g.edge_weight.add_(1)
    assert "w2" not in g.to("meta")._cache  # stale: left behind
    permuted = autograd._permuted(g, g.edge_weight, "csr")
    assert autograd._permuted(g, g.edge_weight, "csr") is permuted
    g.edge_weight.mul_(3)
    assert torch.equal(autograd._permuted(g, g.edge_weight, "csr"), g.edge_weight[g.csr.perm])
    again = pickle.loads(pickle.dumps(g))
    assert torch.equal(autograd._permuted(again, again.edge_weight, "csr"), g.edge_weight[g.csr.perm])


def test_the_edges_are_fixed_once_built():
    """Found by review: the Graph shares an int64 contiguous edge_index with the caller, and its sizes and
    edge_index were plain attributes: an in-place rewrite or a reassignment left the cached CSR, degrees and GCN
    normalisation describing the old edges (the reference then mixed live edges with cached degrees)."""
    edge_index = torch.tensor([[1, 2], [0, 1]])
    g = Graph(edge_index, num_nodes=3)
    x = torch.eye(3)
    before = graphfuse.aggregate(g, x, reduce="mean")
    for name, value in (("edge_index", torch.tensor([[0], [1]])), ("num_src", 4), ("num_dst", 4), ("num_edges", 1),
                        ("device", torch.device("meta"))):
        with pytest.raises(AttributeError, match=f"Graph: {name} cannot be changed once the graph is built"):
            setattr(g, name, value)
    g.edge_weight = torch.ones(2)  # still allowed
    g.edge_weight = None
    edge_index[0, 0] = 0  # the caller's tensor, shared with the graph
    for use in (lambda: graphfuse.aggregate(g, x, reduce="mean"), lambda: g.csr, lambda: gcn_norm(g)):
        with pytest.raises(ValueError, match="Graph: edge_index was changed in place after the graph was built"):
            use()
    fresh = Graph(torch.tensor([[1, 2], [0, 1]]), num_nodes=3)
    assert torch.equal(graphfuse.aggregate(fresh, x, reduce="mean"), before)
    again = pickle.loads(pickle.dumps(fresh))  # a loaded tensor's version counter starts afresh
    assert torch.equal(graphfuse.aggregate(again, x, reduce="mean"), before)
    with torch.inference_mode():  # an inference tensor has no version counter
        assert graphfuse.aggregate(Graph(torch.tensor([[1, 2], [0, 1]]), num_nodes=3), x, reduce="mean").shape == (3, 3)
    with pytest.raises(TypeError, match=r"Graph.to: device must be a torch.device, str or int; got torch.float64 "
                       r"\(set graph.edge_weight"):
        fresh.to(torch.float64)


def test_from_pyg_names_what_it_needs():
    with pytest.raises(TypeError, match="Graph.from_pyg: data must be a torch_geometric.data.Data .*got Tensor"):
        graphfuse.Graph.from_pyg(torch.tensor([[0, 1], [1, 0]]))


def test_a_moved_weighted_entry_is_rebuilt_when_the_moved_weights_change():
    """Graph.to moves a weighted cache entry that is current, stamped with the moved weights: an in-place change
    of those weights before the entry's next use must rebuild it, as on the graph it came from (mutant G02 left
    the moved entry unstamped, so that use stamped the changed weights onto the stale value and served it).
    The meta device stands in for CUDA."""
    g = make_graph_case("hub")
    g.edge_weight = torch.rand(g.num_edges)
    g.cached("doubled", lambda: g.edge_weight * 2, weighted=True)
    builds = []

    def build(graph):
        builds.append(1)
        return graph.edge_weight * 2

    kept = g.to("meta")
    kept.cached("doubled", lambda: build(kept), weighted=True)
    assert builds == []  # current when moved: moved along, not rebuilt
    changed = g.to("meta")
    changed.edge_weight.mul_(3)
    changed.cached("doubled", lambda: build(changed), weighted=True)
    assert builds == [1]


def test_from_pyg_leaves_multi_dimensional_edge_features_out():
    """A (E, D) edge_attr holds edge features, not weights: the graph is unweighted (mutant G06 passed any
    floating edge_attr to Graph, which refused its shape)."""
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 0]])
    g = Graph.from_pyg(Data(edge_index=edge_index, num_nodes=3, edge_attr=torch.rand(3, 4)))
    assert g.edge_weight is None and g.num_nodes == 3 and torch.equal(g.edge_index, edge_index)


def test_coo_to_csc_refuses_a_source_past_num_src():
    """Mutant C01 checked the target row for coo_to_csc too: a source id past num_src gave a colptr that ends
    before the last entry, silently."""
    for past in (3, 7):
        with pytest.raises(ValueError, match=r"coo_to_csc: edge_index ids must be >= 0 and row 0 below num_src=3"):
            coo_to_csc(torch.tensor([[0, past], [0, 1]]), 3)
    colptr, row, perm = coo_to_csc(torch.tensor([[0, 2], [5, 1]]), 3)  # targets are not bounded by num_src
    assert colptr.tolist() == [0, 1, 1, 2] and row.tolist() == [5, 1] and perm.tolist() == [0, 1]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("normalise", [gcn_norm, mean_norm], ids=["gcn_norm", "mean_norm"])
def test_half_precision_weights_sum_their_degrees_in_float32(dtype, normalise):
    """A hub with 3,000 unit in-edges: in float16 (bfloat16) a running sum of ones stops at 2,048 (256), so
    degrees summed in the weights' dtype normalise the hub's edges by the wrong degree (mutant N02). The
    results must match the float64 normalisation to the half dtype's relative precision."""
    n = 3001
    src = torch.arange(1, n)
    edge_index = torch.stack([src, torch.zeros_like(src)])
    half = normalise(Graph(edge_index, num_nodes=n, edge_weight=torch.ones(n - 1, dtype=dtype)))
    exact = normalise(Graph(edge_index, num_nodes=n, edge_weight=torch.ones(n - 1, dtype=torch.float64)))
    assert half.edge_weight.dtype == dtype and torch.equal(half.edge_index, exact.edge_index)
    torch.testing.assert_close(half.edge_weight.double(), exact.edge_weight, rtol=tolerance(dtype)["rtol"], atol=0)


def test_reweighted_keeps_the_edges_and_nothing_cached():
    """Graph.reweighted: the same edge_index and sizes with other weights (checked as the constructor checks
    them), or none; the original keeps its weights and caches, and nothing cached moves over."""
    edge_index = torch.tensor([[0, 1, 2, 2], [1, 2, 0, 1]])
    g = Graph(edge_index, num_src=3, num_dst=4, edge_weight=torch.rand(4))
    own, csr = g.edge_weight, g.csr
    w = torch.rand(4, dtype=torch.float64)
    other = g.reweighted(w)
    assert other.edge_index is g.edge_index and (other.num_src, other.num_dst) == (3, 4)
    assert other.edge_weight is w and g.edge_weight is own and g.csr is csr
    assert other.cached("csr", lambda: "built anew") == "built anew"
    assert g.reweighted(None).edge_weight is None
    with pytest.raises(ValueError, match=r"Graph: edge_weight must have shape \(E=4,\); got \(3,\)"):
        g.reweighted(torch.rand(3))
