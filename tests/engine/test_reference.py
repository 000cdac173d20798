"""Reference engine against dense-matrix math, gradcheck, validation errors and backend dispatch."""

import threading

import pytest
import torch

import graphfuse
from cases import GRAPH_CASES, make_graph_case
from graphfuse.engine import Backend, reference, register_backend, resolve
from graphfuse.graph import to_dense


def dense_aggregate(g, x, w, reduce):
    """Row-by-row dense oracle: every reduce spelled out over each target's incoming messages."""
    out = torch.zeros(g.num_dst, *x.shape[1:], dtype=torch.float64)
    src, dst = g.edge_index
    for i in range(g.num_dst):
        edges = (dst == i).nonzero().flatten()
        if edges.numel() == 0:
            continue
        msgs = x[src[edges]].double()
        if w is not None:
            msgs = msgs * w[edges].double().view(-1, *([1] * (x.dim() - w.dim())))
        out[i] = {"sum": msgs.sum(0), "mean": msgs.mean(0), "max": msgs.amax(0), "min": msgs.amin(0)}[reduce]
    return out


@pytest.mark.parametrize("case", GRAPH_CASES)
@pytest.mark.parametrize("reduce", graphfuse.engine.REDUCES)
@pytest.mark.parametrize("weighted", [False, True])
def test_aggregate_matches_dense(case, reduce, weighted):
    g = make_graph_case(case)
    x = torch.randn(g.num_src, 7, dtype=torch.float64)
    w = torch.rand(g.num_edges, dtype=torch.float64) + 0.5 if weighted else None
    out = graphfuse.aggregate(g, x, w, reduce=reduce)
    assert out.shape == (g.num_dst, 7)
    torch.testing.assert_close(out, dense_aggregate(g, x, w, reduce))
    if reduce == "sum":  # the same thing as a dense matrix product
        dense = to_dense(g if w is None else graphfuse.Graph(g.edge_index, edge_weight=w, num_src=g.num_src,
                                                              num_dst=g.num_dst))
        torch.testing.assert_close(out, dense @ x)


def test_empty_neighbourhoods_are_zero_for_every_reduce():
    g = make_graph_case("isolated")
    x = torch.randn(g.num_src, 3) - 100.0  # all messages negative: a max starting at 0 would be wrong
    for reduce in graphfuse.engine.REDUCES:
        out = graphfuse.aggregate(g, x, reduce=reduce)
        assert (out[g.in_degree == 0] == 0).all()
        assert (out[g.in_degree > 0] < -90).all(), reduce


def test_multi_head_aggregate():
    g = make_graph_case("duplicates")
    x = torch.randn(g.num_src, 3, 5, dtype=torch.float64)
    w = torch.rand(g.num_edges, 3, dtype=torch.float64)
    out = graphfuse.aggregate(g, x, w)
    for h in range(3):
        torch.testing.assert_close(out[:, h], dense_aggregate(g, x[:, h], w[:, h], "sum"))


@pytest.mark.parametrize("reduce", graphfuse.engine.REDUCES)
def test_aggregate_gradcheck(reduce):
    g = make_graph_case("unsorted")
    x = torch.randn(g.num_src, 3, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(g.num_edges, dtype=torch.float64) + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, w: graphfuse.aggregate(g, x, w, reduce=reduce), (x, w))


def test_sddmm_matches_loop_and_gradcheck():
    g = make_graph_case("bipartite")
    a = torch.randn(g.num_dst, 2, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(g.num_src, 2, 4, dtype=torch.float64, requires_grad=True)
    out = graphfuse.sddmm(g, a, b)
    src, dst = g.edge_index
    expected = torch.stack([(a[dst[e]] * b[src[e]]).sum(-1) for e in range(g.num_edges)])
    torch.testing.assert_close(out, expected)
    w = torch.rand(g.num_edges, dtype=torch.float64)
    torch.testing.assert_close(graphfuse.sddmm(g, a, b, w), expected * w[:, None])
    assert torch.autograd.gradcheck(lambda a, b: graphfuse.sddmm(g, a, b), (a, b))


def test_edge_softmax_normalises_per_target_and_is_stable():
    g = make_graph_case("hub")
    scores = torch.randn(g.num_edges, 4, dtype=torch.float64) * 50 + 1000  # exp would overflow unshifted
    alpha = graphfuse.edge_softmax(g, scores)
    assert torch.isfinite(alpha).all()
    sums = torch.zeros(g.num_dst, 4, dtype=torch.float64).index_add_(0, g.edge_index[1], alpha)
    torch.testing.assert_close(sums[g.in_degree > 0], torch.ones_like(sums[g.in_degree > 0]))
    dst = g.edge_index[1]
    i = int(dst[0])
    edges = (dst == i).nonzero().flatten()
    torch.testing.assert_close(alpha[edges], torch.softmax(scores[edges], 0))
    small = make_graph_case("duplicates")
    s = torch.randn(small.num_edges, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s: graphfuse.edge_softmax(small, s), (s,))




@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_sddmm_sums_in_float32(dtype):
    """sddmm rounded every product to half precision before the sum (found by review): float16's 300 * 300
    overflowed to inf, and the sum to NaN, where the dot product is 300; bfloat16's 3 * 87 and 3 * -88 rounded apart
    to -4 where it is -3."""
    g = graphfuse.Graph(torch.tensor([[0], [0]]), num_nodes=1)
    a, b = (torch.tensor([[300.0, 300.0]]), torch.tensor([[300.0, -299.0]])) if dtype == torch.float16 else \
        (torch.tensor([[3.0, 3.0]]), torch.tensor([[87.0, -88.0]]))
    got = graphfuse.sddmm(g, a.to(dtype), b.to(dtype))
    assert got.dtype == dtype
    assert got.item() == (a.to(dtype).double() @ b.to(dtype).double().T).to(dtype).item()
    heads = graphfuse.sddmm(g, a.to(dtype).view(1, 1, 2), b.to(dtype).view(1, 1, 2), torch.tensor([0.5]))
    assert heads.shape == (1, 1) and heads.item() == got.item() / 2


def test_weights_made_in_inference_mode_train_on_the_reference_backend():
    """A product with an inference tensor saves it for backward, which it refuses: the reference backend raised
    where the kernel backends copy such weights (autograd._saveable; found by review)."""
    g = make_graph_case("duplicates")
    with torch.inference_mode():
        w = torch.rand(g.num_edges, dtype=torch.float64) + 0.1
    x = torch.randn(g.num_nodes, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(g.num_nodes, 3, dtype=torch.float64)
    for reduce in ("sum", "mean", "max", "min"):
        out = graphfuse.aggregate(g, x, w, reduce, backend="reference")
        want = graphfuse.aggregate(g, x, w.clone(), reduce, backend="reference")
        grad, = torch.autograd.grad(out.sum(), x)
        torch.testing.assert_close(grad, torch.autograd.grad(want.sum(), x)[0])
    out = graphfuse.sddmm(g, x, b, w, backend="reference")
    torch.autograd.grad(out.sum(), x)
    with torch.no_grad():  # no copy where nothing is recorded
        assert reference.saveable_weights(w) is w


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_sums_accumulate_in_float32(dtype):
    """Sums over a hub's 5,000 in-edges: in float16 / bfloat16 a running sum of ones stops at 2048 / 256, which
    gave 1-D edge softmax weights summing to ~4 and GCN / mean normalised weights off by the same factor."""
    n = 5000
    g = graphfuse.Graph(torch.stack([torch.arange(n), torch.zeros(n, dtype=torch.long)]), num_nodes=n)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(n, 3, generator=gen, dtype=torch.float64).to(dtype)
    w = (torch.rand(n, generator=gen, dtype=torch.float64) + 0.5).to(dtype)
    scores = torch.randn(n, generator=gen, dtype=torch.float64).to(dtype)
    for reduce in ("sum", "mean"):
        got = graphfuse.aggregate(g, x, w, reduce)
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), reference.aggregate(g, x.double(), w.double(), reduce), rtol=1e-2,
                                   atol=0)
    for s in (scores, scores.view(n, 1)):  # the 1-D path was the wrong one
        alpha = graphfuse.edge_softmax(g, s)
        assert alpha.dtype == dtype
        torch.testing.assert_close(alpha.double(), graphfuse.edge_softmax(g, s.double()), rtol=1e-2, atol=1e-6)
    gw = graphfuse.Graph(g.edge_index, num_nodes=n, edge_weight=w)
    g64 = graphfuse.Graph(g.edge_index, num_nodes=n, edge_weight=w.double())
    for norm in (graphfuse.gcn_norm, graphfuse.mean_norm):
        got = norm(gw).edge_weight
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), norm(g64).edge_weight, rtol=1e-2, atol=1e-7)
@pytest.mark.parametrize(
    "call, error, pattern",
    [
        (lambda g: graphfuse.aggregate(g, torch.randn(3, 4)), ValueError, r"x must have shape \(num_src=50, F\)"),
        (lambda g: graphfuse.aggregate(g, torch.ones(50, 4, dtype=torch.long)), TypeError, "x must be floating point"),
        (lambda g: graphfuse.aggregate(g, torch.randn(50, 4), reduce="prod"), ValueError, "reduce must be one of"),
        (lambda g: graphfuse.aggregate(g, torch.randn(50, 4), torch.rand(7)), ValueError, r"edge_weight .*E=300"),
        (lambda g: graphfuse.aggregate(g.edge_index, torch.randn(50, 4)), TypeError, "graph must be a graphfuse.Graph"),
        (lambda g: graphfuse.aggregate(g, torch.randn(50, 4), backend="nope"), ValueError, "unknown backend 'nope'"),
        (lambda g: graphfuse.sddmm(g, torch.randn(50, 4), torch.randn(50, 3)), ValueError, "trailing shape"),
        (lambda g: graphfuse.sddmm(g, torch.randn(50, 4), torch.randn(50, 4).double()), TypeError, "share a dtype"),
        (lambda g: graphfuse.edge_softmax(g, torch.randn(299)), ValueError, r"scores must have shape \(E=300,\)"),
        # zero weight heads reached a division by zero in the CUDA path
        (lambda g: graphfuse.aggregate(g, torch.randn(50, 0, 4), torch.rand(300, 0)), ValueError,
         r"edge_weight must have shape \(300,\) \(E=300\); got \(300, 0\)"),
        # an unhashable backend failed in the memo's dict lookup ("unhashable type: 'list'")
        (lambda g: graphfuse.aggregate(g, torch.randn(50, 4), backend=["reference"]), TypeError,
         r"aggregate: backend must be a backend name \(str\); got list"),
        (lambda g: graphfuse.edge_softmax(g, torch.randn(300), backend=["reference"]), TypeError,
         r"edge_softmax: backend must be a backend name \(str\); got list"),
        (lambda g: graphfuse.sddmm(g, torch.randn(50, 4), torch.randn(50, 4), backend=1), TypeError,
         r"sddmm: backend must be a backend name \(str\); got int"),
        (lambda g: graphfuse.set_default_backend(["reference"]), TypeError,
         r"set_default_backend: name must be a backend name \(str\); got list"),
    ],
)
def test_validation_errors(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call(make_graph_case("unsorted"))


@pytest.mark.parametrize(
    "call, error, pattern",
    [
        (lambda g, x: graphfuse.aggregate(g, x.to("meta")), ValueError, "x is on meta but the graph is on cpu"),
        (lambda g, x: graphfuse.aggregate(g, x, deterministic=1), TypeError, "deterministic must be None or a bool"),
        (lambda g, x: graphfuse.aggregate(g, x, reduce=["sum"]), ValueError, "reduce must be one of"),
        (lambda g, x: graphfuse.aggregate(g, x, backend=["reference"]), TypeError, r"backend must be a backend name"),
        (lambda g, x: graphfuse.aggregate(g, x, backend="nope"), ValueError, "unknown backend 'nope'"),
        (lambda g, x: graphfuse.aggregate(g, x.long()), TypeError, "x must be floating point"),
        (lambda g, x: graphfuse.aggregate(g, x[:-1]), ValueError, r"x must have shape \(num_src=50, F\)"),
        (lambda g, x: (g.edge_index.add_(0), graphfuse.aggregate(g, x)), ValueError, "changed in place"),
    ],
)
def test_a_memoised_call_is_checked_as_a_first_one(call, error, pattern):
    """The layers' call (the graph's own weights, no sampling) is served from the graph's memo once made: what the
    memo's key does not fix (x's device, the edges) is checked per call, and an invalid argument still gets its
    error rather than a hit (deterministic=1 equals True as a key, an unhashable reduce failed in the lookup)."""
    g, x = make_graph_case("unsorted"), torch.randn(50, 4)
    g.edge_weight = torch.rand(g.num_edges)
    for deterministic in (None, True):
        graphfuse.aggregate(g, x, deterministic=deterministic)
    assert graphfuse.aggregate(g, x).shape == (50, 4)  # a hit
    with pytest.raises(error, match=pattern):
        call(g, x)


def test_the_layers_call_is_served_from_the_memo_after_the_first(monkeypatch):
    """The layers' call (the graph's own weights or none, no sampling) finds the entry the full path made: its
    key is the full path's (a key of its own missed every time and paid the full path's host time per call)."""
    from graphfuse.engine import dispatcher

    full = []
    resolve_cached = dispatcher.resolve_cached
    monkeypatch.setattr(dispatcher, "resolve_cached", lambda *args, **kw: full.append(args[1]) or resolve_cached(*args, **kw))
    g, x = make_graph_case("unsorted"), torch.randn(50, 4)
    for weights in (None, torch.rand(g.num_edges), torch.rand(g.num_edges).requires_grad_()):
        g.edge_weight = weights
        for _ in range(3):
            graphfuse.aggregate(g, x, reduce="max", backend="reference")
    assert len(full) == 3, full


def test_a_memoised_call_follows_the_sampling_block_and_the_weights():
    """A memo hit for the graph's own weights serves only calls the full path would serve the same way: inside
    ``use_sampling`` the sampled path runs, weights of another dtype than x are cast, replaced weights are used,
    and an ``nn.Parameter`` x is accepted as a plain tensor is."""
    g = make_graph_case("unsorted")
    g.edge_weight = torch.rand(g.num_edges)
    x = torch.randn(50, 4)
    graphfuse.aggregate(g, x)
    assert torch.equal(graphfuse.aggregate(g, x), reference.aggregate(g, x, g.edge_weight))
    with pytest.raises(ValueError, match="use_sampling"), graphfuse.engine.use_sampling(graphfuse.EdgeSampling(2)):
        graphfuse.aggregate(g, x)
    with torch.no_grad(), graphfuse.engine.use_sampling(graphfuse.EdgeSampling(2)):
        sampled = graphfuse.aggregate(g, x)
    assert not torch.allclose(sampled, reference.aggregate(g, x, g.edge_weight))
    g.edge_weight = torch.rand(g.num_edges, dtype=torch.float64)
    out = graphfuse.aggregate(g, x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, reference.aggregate(g, x, g.edge_weight.float()))
    param = torch.nn.Parameter(x.clone())
    torch.testing.assert_close(graphfuse.aggregate(g, param), out)
    seen = []  # the weights' dtype a backend gets: x's (the kernels read them as x's dtype)
    register_backend(Backend(name="fake_dtypes", devices=frozenset({"cpu"}), ops={
        "aggregate": lambda graph, x, edge_weight, reduce: seen.append(edge_weight.dtype) or x}))
    try:
        for weights in (torch.rand(g.num_edges), torch.rand(g.num_edges, dtype=torch.float64)):
            g.edge_weight = weights
            for _ in range(2):
                graphfuse.aggregate(g, x, backend="fake_dtypes")
    finally:
        graphfuse.engine.unregister_backend("fake_dtypes")
    assert seen == [torch.float32] * 4


@pytest.mark.parametrize(
    "backend, error, pattern",
    [
        ("reference", TypeError, "backend must be a graphfuse.engine.Backend; got str"),
        # an int name was registered and broke every later "unknown backend" message (sorting the names)
        (Backend(name=3, ops={"aggregate": reference.aggregate}, devices=frozenset({"cpu"})), ValueError,
         "Backend.name must be a str other than"),
        (Backend(name="auto", ops={"aggregate": reference.aggregate}, devices=frozenset({"cpu"})), ValueError,
         "got 'auto'"),
        (Backend(name="fused", ops={"aggregate": reference.aggregate}, devices=frozenset({"cpu"})), ValueError,
         "got 'fused'"),
        (Backend(name="x", ops={"aggregate": "not callable"}, devices=frozenset({"cpu"})), TypeError,
         "Backend.ops must map op names to callables"),
        # a str was matched by substring ("c" in "cpu")
        (Backend(name="x", ops={"aggregate": reference.aggregate}, devices="cpu"), TypeError,
         r"Backend.devices must be a set of device types"),
        (Backend(name="x", ops={"aggregate": reference.aggregate}, devices=frozenset({"cpu"}), deterministic_on="cpu"),
         TypeError, r"Backend.deterministic_on must be a set of device types"),
    ],
)
def test_register_backend_checks_its_argument(backend, error, pattern):
    before = graphfuse.engine.registered_backends()
    with pytest.raises(error, match=pattern):
        register_backend(backend)
    assert graphfuse.engine.registered_backends() == before
    with pytest.raises(ValueError, match="unknown backend 'typo'"):
        graphfuse.aggregate(make_graph_case("unsorted"), torch.randn(50, 4), backend="typo")


def test_cuda_only_backend_refuses_cpu_tensors_and_auto_skips_it():
    fake = Backend(name="fake_cuda", ops={"aggregate": reference.aggregate}, devices=frozenset({"cuda"}),
                   deterministic_on=frozenset({"cuda"}), priority=10)
    register_backend(fake)
    try:
        g = make_graph_case("unsorted")
        with pytest.raises(ValueError, match="runs on \\['cuda'\\] tensors; got tensors on cpu"):
            graphfuse.aggregate(g, torch.randn(50, 4), backend="fake_cuda")
        assert resolve("aggregate", torch.device("cpu")) is reference.aggregate
    finally:
        graphfuse.engine.unregister_backend("fake_cuda")


def test_auto_choice_is_memoised_per_graph_and_follows_the_registry():
    calls = []

    def only_max(op, **call):
        calls.append(call["reduce"])
        return call["reduce"] == "max"

    def fake(graph, x, edge_weight, reduce):
        return torch.full((graph.num_dst, x.size(1)), 7.0)

    register_backend(Backend(name="fake_max", ops={"aggregate": fake}, devices=frozenset({"cpu"}), priority=10,
                             supports=only_max))
    g = make_graph_case("unsorted")
    x = torch.randn(50, 4)
    try:
        for _ in range(3):
            assert (graphfuse.aggregate(g, x, reduce="max") == 7).all()
            assert torch.equal(graphfuse.aggregate(g, x), reference.aggregate(g, x))
        assert calls == ["max", "sum"]  # asked once per signature, then memoised on the graph
        with graphfuse.use_backend("reference"):  # the default backend is part of the memo's key
            assert not (graphfuse.aggregate(g, x, reduce="max") == 7).all()
    finally:
        graphfuse.engine.unregister_backend("fake_max")
    assert torch.equal(graphfuse.aggregate(g, x, reduce="max"), reference.aggregate(g, x, reduce="max"))
    with pytest.raises(ValueError, match="unknown backend 'fake_max'"):
        graphfuse.engine.unregister_backend("fake_max")


def test_bind_is_memoised_per_signature_and_never_reused_for_another():
    """A backend's ``bind`` runs once per memo signature (x's dtype and shape, the reduce, which weights, their
    rank and whether they need a gradient); a call with another width, reduce or kind of weights gets its own
    binding ((E,) and (E, 1) weights of a one-head x too: the kernel backends bind one-head weights differently),
    and a ``bind`` returning None leaves the call to ``ops[op]``."""
    binds = []

    def bind(op, *, graph, x, edge_weight, reduce):
        kind = None if edge_weight is None else (edge_weight.dim(), edge_weight.requires_grad)
        binds.append((tuple(x.shape), reduce, edge_weight is graph.edge_weight, kind))
        if reduce == "min":
            return None
        width = x.size(1)
        return lambda graph, x, edge_weight, reduce: torch.full((graph.num_dst, width), float(len(binds)))

    def op(graph, x, edge_weight, reduce):
        return torch.full((graph.num_dst, x.size(1)), -1.0)

    register_backend(Backend(name="fake_bound", ops={"aggregate": op}, devices=frozenset({"cpu"}), bind=bind))
    g = make_graph_case("unsorted")
    w = torch.rand(g.num_edges)
    try:
        first = [graphfuse.aggregate(g, torch.randn(50, 4), backend="fake_bound") for _ in range(3)]
        assert all(o.shape == (50, 4) and (o == 1).all() for o in first)
        assert (graphfuse.aggregate(g, torch.randn(50, 6), backend="fake_bound") == 2).all()
        assert graphfuse.aggregate(g, torch.randn(50, 6), backend="fake_bound").shape == (50, 6)
        assert (graphfuse.aggregate(g, torch.randn(50, 4), w, backend="fake_bound") == 3).all()
        assert (graphfuse.aggregate(g, torch.randn(50, 4), reduce="min", backend="fake_bound") == -1).all()
        assert (graphfuse.aggregate(g, torch.randn(50, 4), reduce="min", backend="fake_bound") == -1).all()
        x3 = torch.randn(50, 1, 4)
        for weights in (w, w.view(-1, 1), w.view(-1, 1), w.clone().requires_grad_(), w.view(-1, 1)):
            graphfuse.aggregate(g, x3, weights, backend="fake_bound")
        assert binds == [((50, 4), "sum", True, None), ((50, 6), "sum", True, None), ((50, 4), "sum", False, (1, False)),
                         ((50, 4), "min", True, None), ((50, 1, 4), "sum", False, (1, False)),
                         ((50, 1, 4), "sum", False, (2, False)), ((50, 1, 4), "sum", False, (1, True))]
    finally:
        graphfuse.engine.unregister_backend("fake_bound")


def test_deterministic_request_and_default_backend():
    g = make_graph_case("unsorted")
    x = torch.randn(50, 4)
    assert torch.equal(graphfuse.aggregate(g, x, deterministic=True), graphfuse.aggregate(g, x))
    with pytest.raises(ValueError, match="not deterministic on cuda"):
        resolve("aggregate", torch.device("cuda"), "reference", deterministic=True)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)  # PyTorch's own ops (the reference's) are deterministic then
    try:
        assert resolve("aggregate", torch.device("cuda"), "reference") is reference.aggregate
        assert resolve("edge_softmax", torch.device("cuda"), "reference", deterministic=True) is reference.edge_softmax
        torch.use_deterministic_algorithms(True, warn_only=True)  # then PyTorch may still run atomics: refused
        with pytest.raises(ValueError, match="not deterministic on cuda"):
            resolve("aggregate", torch.device("cuda"), "reference", deterministic=True)
        # ... unless only the flag asks (Lightning's deterministic="warn"): then warn and run, as PyTorch does;
        # "auto" raised "no registered backend runs this call deterministically" for half-precision CUDA features
        for name in ("reference", None):
            with pytest.warns(UserWarning, match="no deterministic backend runs this call on cuda; running 'ref"):
                assert resolve("aggregate", torch.device("cuda"), name) is reference.aggregate
    finally:
        torch.use_deterministic_algorithms(previous)
    with graphfuse.use_backend("reference"):
        assert graphfuse.engine.get_default_backend() == "reference"
    assert graphfuse.engine.get_default_backend() == "auto"
    with pytest.raises(ValueError, match="unknown backend"):
        graphfuse.set_default_backend("nope")


def _sevens(graph, x, edge_weight, reduce):
    return torch.full((graph.num_dst, x.size(1)), 7.0)


def test_auto_skips_a_nondeterministic_backend_when_determinism_is_asked():
    """Mutation audit: "auto" choosing without the deterministic pass, and the memo ignoring torch's flag, both
    went unnoticed (the GPU tests name their backends)."""
    g, x = make_graph_case("unsorted"), torch.randn(50, 4)
    register_backend(Backend(name="fake_atomic", ops={"aggregate": _sevens}, devices=frozenset({"cpu"}), priority=10))
    try:
        assert (graphfuse.aggregate(g, x) == 7).all()
        assert torch.equal(graphfuse.aggregate(g, x, deterministic=True), reference.aggregate(g, x))
    finally:
        graphfuse.engine.unregister_backend("fake_atomic")
    register_backend(Backend(name="fake_torch_flag", ops={"aggregate": _sevens}, devices=frozenset({"cpu"}),
                             torch_deterministic=True, priority=10))
    previous = torch.are_deterministic_algorithms_enabled()
    try:  # deterministic only under torch's flag: the choice follows the flag's changes
        torch.use_deterministic_algorithms(False)
        assert torch.equal(graphfuse.aggregate(g, x, deterministic=True), reference.aggregate(g, x))
        torch.use_deterministic_algorithms(True)
        assert (graphfuse.aggregate(g, x, deterministic=True) == 7).all()
    finally:
        torch.use_deterministic_algorithms(previous)
        graphfuse.engine.unregister_backend("fake_torch_flag")


def test_determinism_is_per_call_for_the_atomic_backends():
    """gas and hpspmm run atomics only in their own sum/mean aggregations: deterministic=True took their max/min
    (run by GE-SpMM), hpspmm's per-head weights (GE-SpMM too), sddmm and edge softmax for nondeterministic and
    refused them. Without CuPy the backend then reports itself unavailable, which shows that the determinism
    check let the call through."""
    cuda = torch.device("cuda")
    g = make_graph_case("unsorted")
    x = torch.randn(50, 4)
    w3 = torch.rand(g.num_edges, 3)
    cases = [  # backend, op, call, deterministic
        ("gas", "aggregate", {"reduce": "max"}, True), ("gas", "aggregate", {"reduce": "min"}, True),
        ("hpspmm", "aggregate", {"reduce": "max"}, True), ("hpspmm", "aggregate", {"edge_weight": w3}, True),
        ("gas", "sddmm", {"a": x, "b": x}, True), ("hpspmm", "edge_softmax", {"scores": x[:, 0]}, True),
        ("gas", "aggregate", {}, False), ("gas", "aggregate", {"reduce": "mean", "edge_weight": w3}, False),
        ("hpspmm", "aggregate", {"reduce": "mean"}, False), ("hpspmm", "aggregate", {"edge_weight": w3[:, 0]}, False),
    ]
    for name, op, extra, deterministic in cases:
        call = {"graph": g, **({"x": x, "edge_weight": None, "reduce": "sum"} if op == "aggregate" else {}), **extra}
        if not deterministic:
            with pytest.raises(ValueError, match=f"backend '{name}' is not deterministic on cuda for this call"):
                resolve(op, cuda, name, deterministic=True, **call)
        elif graphfuse.kernels.runtime.is_available():
            assert resolve(op, cuda, name, deterministic=True, **call) is not None
        else:
            with pytest.raises(RuntimeError, match=f"backend '{name}' is not available here"):
                resolve(op, cuda, name, deterministic=True, **call)


def test_deterministic_and_validate_must_be_bools():
    """deterministic='no' was truthy and asked for deterministic backends; Graph(validate='no') validated."""
    g = make_graph_case("hub")
    x = torch.randn(g.num_src, 3)
    for call in (lambda d: graphfuse.aggregate(g, x, deterministic=d), lambda d: graphfuse.sddmm(g, x, x, deterministic=d),
                 lambda d: graphfuse.edge_softmax(g, torch.randn(g.num_edges), deterministic=d)):
        for bad in ("no", 1):
            with pytest.raises(TypeError, match="deterministic must be None or a bool"):
                call(bad)
        assert call(True).shape == call(None).shape
    with pytest.raises(TypeError, match="Graph: validate must be a bool; got 'no'"):
        graphfuse.Graph(g.edge_index, validate="no")


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_max_min_gradient_goes_to_the_first_tied_entry_in_csr_order(reduce):
    """The kernels' documented rule; the reference's scatter_reduce split a tied gradient evenly (review: 4,157
    of 6,368 maxima tied on binary Cora-like features, so CPU and CUDA training took different steps)."""
    # edges e0: 3 → 0, e1: 1 → 0, e2: 0 → 0, e3: 2 → 1, e4: 4 → 1 (CSR keeps this order within a row)
    g = graphfuse.Graph(torch.tensor([[3, 1, 0, 2, 4], [0, 0, 0, 1, 1]]), num_nodes=5)
    x = torch.tensor([[1.0, 5.0], [1.0, 5.0], [7.0, 3.0], [1.0, 2.0], [7.0, 3.0]], requires_grad=True)
    w = torch.ones(5, requires_grad=True)
    out = graphfuse.aggregate(g, x, w, reduce=reduce)
    out.backward(torch.tensor([[1.0, 10.0], [100.0, 1000.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]))
    if reduce == "max":  # target 0: column 0 ties e0, e1, e2 → e0; column 1 ties e1, e2 → e1; target 1: e3, e4 → e3
        assert out[:2].tolist() == [[1.0, 5.0], [7.0, 3.0]]
        assert x.grad.tolist() == [[0.0, 0.0], [0.0, 10.0], [100.0, 1000.0], [1.0, 0.0], [0.0, 0.0]]
        assert w.grad.tolist() == [1.0, 50.0, 0.0, 3700.0, 0.0]
    else:  # target 0: column 0 ties → e0, column 1 is e0's 2 alone; target 1 as for max
        assert out[:2].tolist() == [[1.0, 2.0], [7.0, 3.0]]
        assert x.grad.tolist() == [[0.0, 0.0], [0.0, 0.0], [100.0, 1000.0], [1.0, 10.0], [0.0, 0.0]]
        assert w.grad.tolist() == [21.0, 0.0, 0.0, 3700.0, 0.0]


def test_use_backend_restores_the_default_when_its_block_raises():
    """Mutant D01 restored the previous default only when the block ended normally: an exception inside
    ``use_backend`` left every later call on that backend."""
    assert graphfuse.engine.get_default_backend() == "auto"
    with pytest.raises(RuntimeError, match="boom"), graphfuse.use_backend("reference"):
        assert graphfuse.engine.get_default_backend() == "reference"
        raise RuntimeError("boom")
    assert graphfuse.engine.get_default_backend() == "auto"


def test_use_backend_is_per_thread():
    """use_backend set the process's default: another thread's calls ran on the block's backend, and two
    threads' overlapping blocks restored each other's previous value out of order (the default stayed
    "reference" after both ended). Now as torch.no_grad: per thread; set_default_backend stays process-wide."""
    entered, release = threading.Event(), threading.Event()
    seen = {}

    def other():
        with graphfuse.use_backend("reference"):
            entered.set()
            release.wait(5)
        seen["after"] = graphfuse.engine.get_default_backend()

    thread = threading.Thread(target=other)
    thread.start()
    assert entered.wait(5)
    seen["main, during"] = graphfuse.engine.get_default_backend()
    with graphfuse.use_backend("reference"):
        release.set()
        thread.join(5)
    assert seen == {"main, during": "auto", "after": "auto"}
    assert graphfuse.engine.get_default_backend() == "auto"
    with pytest.raises(ValueError, match="use_backend: unknown backend 'nope'"), graphfuse.use_backend("nope"):
        pass
    graphfuse.set_default_backend("reference")
    try:
        thread = threading.Thread(target=lambda: seen.update(process=graphfuse.engine.get_default_backend()))
        thread.start()
        thread.join(5)
        assert seen["process"] == "reference"
    finally:
        graphfuse.set_default_backend("auto")


def test_the_memo_follows_torch_warn_only_flag():
    """Under ``torch.use_deterministic_algorithms(True, warn_only=True)`` a backend that is not deterministic runs
    with a warning; once the flag is strict again, the same call on the same graph must be refused, not served
    from the memo (mutant D03 left warn_only out of the memo's key)."""
    g, x = make_graph_case("unsorted"), torch.randn(50, 4)
    register_backend(Backend(name="fake_atomic_warn", ops={"aggregate": _sevens}, devices=frozenset({"cpu"})))
    previous = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    try:
        torch.use_deterministic_algorithms(True, warn_only=True)
        with pytest.warns(UserWarning, match="no deterministic backend runs this call on cpu"):
            assert (graphfuse.aggregate(g, x, backend="fake_atomic_warn") == 7).all()
        torch.use_deterministic_algorithms(True)
        with pytest.raises(ValueError, match="backend 'fake_atomic_warn' is not deterministic on cpu"):
            graphfuse.aggregate(g, x, backend="fake_atomic_warn")
    finally:
        torch.use_deterministic_algorithms(previous[0], warn_only=previous[1])
        graphfuse.engine.unregister_backend("fake_atomic_warn")


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_max_min_with_a_gradient_give_the_no_grad_values_and_zero_rows(reduce):
    """The gradient path (first tied entry in CSR order) must not change the values: targets without in-edges
    stay 0 (mutant E01 gave them a stray message) and the rest equal the no-grad result."""
    g = make_graph_case("isolated")  # nodes 6..9 have no in-edges
    x = torch.randn(g.num_src, 3, dtype=torch.float64)
    w = torch.rand(g.num_edges, dtype=torch.float64) + 0.5
    expected = graphfuse.aggregate(g, x, w, reduce=reduce)
    out = graphfuse.aggregate(g, x.clone().requires_grad_(), w.clone().requires_grad_(), reduce=reduce)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    assert (out[g.in_degree == 0] == 0).all()


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_max_min_with_a_gradient_on_a_graph_without_edges(reduce):
    """Mutant E02 took the tie-breaking gradient path on an edgeless graph, which indexes an empty message
    tensor and raises."""
    g = make_graph_case("no_edges")
    x = torch.randn(g.num_src, 3, requires_grad=True)
    out = graphfuse.aggregate(g, x, reduce=reduce)
    assert torch.equal(out, torch.zeros(g.num_dst, 3))
    out.sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))


def test_per_feature_weights_are_refused_for_two_dimensional_features():
    """(E, H) weights belong to 3-D (N, H, C) features; for (N, F) features an (E, F) tensor is a mistake, not
    per-feature weights (mutant F01 accepted it and scaled each feature by its own column)."""
    g = make_graph_case("unsorted")
    x = torch.randn(50, 4)
    with pytest.raises(ValueError, match=r"aggregate: edge_weight must have shape \(\d+,\) \(E=\d+\); got \(\d+, 4\)"):
        graphfuse.aggregate(g, x, torch.rand(g.num_edges, 4))


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min"])
def test_weights_of_another_dtype_are_cast_to_the_features(reduce):
    """``aggregate`` casts edge weights to x's dtype: float64 weights on float32 features give the float32
    result of float32 weights, for every reduce (mutant F02 dropped the cast: max/min then failed in
    scatter_reduce)."""
    g = make_graph_case("hub")
    x = torch.randn(g.num_src, 5)
    w = torch.rand(g.num_edges, dtype=torch.float64)
    out = graphfuse.aggregate(g, x, w, reduce=reduce)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, graphfuse.aggregate(g, x, w.float(), reduce=reduce))


def test_sddmm_refuses_operands_with_different_head_counts():
    """(N, 1, C) and (N, 3, C) broadcast to three heads; sddmm must refuse them (mutant F03 compared only C)."""
    g = make_graph_case("unsorted")
    with pytest.raises(ValueError, match="sddmm: a and b must share their trailing shape"):
        graphfuse.sddmm(g, torch.randn(50, 1, 4), torch.randn(50, 3, 4))


def test_edge_softmax_refuses_scores_on_another_device():
    """Mutant F05 skipped the device check (the meta device stands in for CUDA)."""
    g = make_graph_case("unsorted")
    with pytest.raises(ValueError, match="edge_softmax: scores is on meta but the graph is on cpu"):
        graphfuse.edge_softmax(g, torch.randn(g.num_edges, device="meta"))
