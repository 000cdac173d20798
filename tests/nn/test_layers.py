"""graphfuse.nn convs against torch_geometric's layers: same weights → same outputs and gradients."""

from __future__ import annotations

import weakref

import pytest
import torch
import torch_geometric.nn as pyg_nn

import graphfuse
import graphfuse.graph.processing as processing
from cases import TOLERANCES, make_graph_case
from graphfuse.nn import GATConv, GCNConv, GraphSAINTConv, SAGEConv

TOL = TOLERANCES[torch.float32]
IN, OUT = 6, 5


def _graph(name: str) -> graphfuse.Graph:
    """make_graph_case graphs plus two of our own: existing (duplicate) self-loops, and a weighted graph."""
    gen = torch.Generator().manual_seed(1)
    if name == "self_loops":
        e = torch.randint(0, 9, (2, 30), generator=gen)
        loops = torch.tensor([[0, 0, 3, 5], [0, 0, 3, 5]])
        return graphfuse.Graph(torch.cat([e, loops], 1), num_nodes=12)
    if name == "weighted":
        e = torch.randint(0, 10, (2, 40), generator=gen)
        return graphfuse.Graph(e, num_nodes=11, edge_weight=torch.rand(40, generator=gen) + 0.1)
    return make_graph_case(name)


CASES = ["isolated", "duplicates", "unsorted", "no_edges", "single_node", "self_loops", "weighted"]

CONVS = {
    "gcn": (lambda: GCNConv(IN, OUT), lambda: pyg_nn.GCNConv(IN, OUT)),
    "gcn_improved_noloops": (
        lambda: GCNConv(IN, OUT, improved=True, add_self_loops=False, bias=False),
        lambda: pyg_nn.GCNConv(IN, OUT, improved=True, add_self_loops=False, bias=False),
    ),
    "gcn_improved": (lambda: GCNConv(IN, OUT, improved=True), lambda: pyg_nn.GCNConv(IN, OUT, improved=True)),
    "gat_h1": (lambda: GATConv(IN, OUT, heads=1), lambda: pyg_nn.GATConv(IN, OUT, heads=1)),
    "gat_h4_concat": (lambda: GATConv(IN, OUT, heads=4), lambda: pyg_nn.GATConv(IN, OUT, heads=4)),
    "gat_h4_mean": (
        lambda: GATConv(IN, OUT, heads=4, concat=False, negative_slope=0.1),
        lambda: pyg_nn.GATConv(IN, OUT, heads=4, concat=False, negative_slope=0.1),
    ),
    "gat_h1_mean_noloops": (
        lambda: GATConv(IN, OUT, heads=1, concat=False, add_self_loops=False, bias=False),
        lambda: pyg_nn.GATConv(IN, OUT, heads=1, concat=False, add_self_loops=False, bias=False),
    ),
    "sage_mean": (lambda: SAGEConv(IN, OUT, aggr="mean"), lambda: pyg_nn.SAGEConv(IN, OUT, aggr="mean")),
    "sage_max": (lambda: SAGEConv(IN, OUT, aggr="max"), lambda: pyg_nn.SAGEConv(IN, OUT, aggr="max")),
    "sage_pool": (
        lambda: SAGEConv(IN, OUT, aggr="pool", normalize=True),
        lambda: pyg_nn.SAGEConv(IN, OUT, aggr="max", project=True, normalize=True),
    ),
    "sage_noroot": (
        lambda: SAGEConv(IN, OUT, root_weight=False, bias=False),
        lambda: pyg_nn.SAGEConv(IN, OUT, root_weight=False, bias=False),
    ),
}


def _pair(conv: str, table: dict = CONVS):
    torch.manual_seed(0)
    make_ours, make_theirs = table[conv]
    ours, theirs = make_ours(), make_theirs()
    ours.load_state_dict(theirs.state_dict())
    return ours.eval(), theirs.eval()


def _pyg_args(conv: str, graph: graphfuse.Graph) -> tuple:
    """PyG's forward arguments. GCN is the only one of the three PyG layers that reads edge weights.

    PyG 2.8's ``GCNConv(improved=True)`` ignores ``improved`` when called without edge weights (its
    ``add_remaining_self_loops`` then returns no weights and ``gcn_norm`` falls back to ones), so improved GCN
    gets explicit unit weights: fill value 2 where a node has no self-loop, an existing loop kept with weight 1,
    which ours computes either way (GCNConv's docstring).
    """
    if conv.startswith("gcn_improved") and graph.edge_weight is None:
        return graph.edge_index, torch.ones(graph.num_edges)
    if conv.startswith("gcn") and graph.edge_weight is not None:
        return graph.edge_index, graph.edge_weight
    return (graph.edge_index,)


def _grads(ours, theirs, out_ours, out_theirs, inputs_ours, inputs_theirs, **kwargs):
    """The names of PyG's parameters and the gradients, for a random output gradient, of each layer's output
    with respect to its ``inputs`` and then its parameters (ours in PyG's order)."""
    grad_out = torch.randn_like(out_theirs)
    names = [name for name, _ in theirs.named_parameters()]
    ours_params = dict(ours.named_parameters())
    got = torch.autograd.grad(out_ours, [*inputs_ours, *(ours_params[n] for n in names)], grad_out, **kwargs)
    want = torch.autograd.grad(out_theirs, [*inputs_theirs, *theirs.parameters()], grad_out, **kwargs)
    return names, got, want


def _compare(ours, theirs, x, ours_graph, pyg_args) -> None:
    x_ours = x.clone().requires_grad_()
    x_theirs = x.clone().requires_grad_()
    out_ours = ours(x_ours, ours_graph)
    out_theirs = theirs(x_theirs, *pyg_args)
    torch.testing.assert_close(out_ours, out_theirs, **TOL)
    names, grads_ours, grads_theirs = _grads(ours, theirs, out_ours, out_theirs, [x_ours], [x_theirs])
    for name, g_ours, g_theirs in zip(["x", *names], grads_ours, grads_theirs):
        torch.testing.assert_close(g_ours, g_theirs, **TOL, msg=lambda m, name=name: f"grad of {name}: {m}")


# An edge_index input carries no weights, so the weighted case runs with a Graph input only.
INPUTS = [(c, kind) for c in CASES for kind in ("graph", "edge_index")]
INPUTS.remove(("weighted", "edge_index"))


@pytest.mark.parametrize(("case", "graph_input"), INPUTS)
@pytest.mark.parametrize("conv", sorted(CONVS))
def test_conv_matches_pyg(conv, case, graph_input):
    graph = _graph(case)
    ours, theirs = _pair(conv)
    x = torch.randn(graph.num_nodes, IN, generator=torch.Generator().manual_seed(2))
    _compare(ours, theirs, x, graph if graph_input == "graph" else graph.edge_index, _pyg_args(conv, graph))


@pytest.mark.parametrize("conv", ["sage_mean", "sage_max", "sage_pool"])
def test_sage_on_bipartite_block_matches_pyg(conv):
    graph = make_graph_case("bipartite")
    ours, theirs = _pair(conv)
    x = torch.randn(graph.num_src, IN, generator=torch.Generator().manual_seed(3))
    x_dst = x[: graph.num_dst]
    out_ours = ours(x, graph)
    out_theirs = theirs((x, x_dst), graph.edge_index, size=(graph.num_src, graph.num_dst))
    assert out_ours.shape == (graph.num_dst, OUT)
    torch.testing.assert_close(out_ours, out_theirs, **TOL)


SAGE_PAIRS = {  # in_channels = (F_src, F_dst) = (IN, 3)
    "mean": (lambda: SAGEConv((IN, 3), OUT), lambda: pyg_nn.SAGEConv((IN, 3), OUT)),
    "max": (lambda: SAGEConv((IN, 3), OUT, aggr="max"), lambda: pyg_nn.SAGEConv((IN, 3), OUT, aggr="max")),
    "pool": (lambda: SAGEConv((IN, 3), OUT, aggr="pool", normalize=True),
             lambda: pyg_nn.SAGEConv((IN, 3), OUT, aggr="max", project=True, normalize=True)),
    "noroot": (lambda: SAGEConv((IN, 3), OUT, root_weight=False), lambda: pyg_nn.SAGEConv((IN, 3), OUT, root_weight=False)),
}


@pytest.mark.parametrize("graph_input", ["graph", "edge_index"])
@pytest.mark.parametrize("targets", [3, 9])  # fewer and more targets than the 5 sources
@pytest.mark.parametrize("aggr", sorted(SAGE_PAIRS))
def test_sage_on_a_pair_of_node_sets_matches_pyg(aggr, targets, graph_input):
    """PyG's ``SAGEConv((F_src, F_dst), ...)((x_src, x_dst), edge_index)``: targets with features of their own
    and of another width, also more targets than sources; values and the gradients of both inputs and every
    parameter."""
    gen = torch.Generator().manual_seed(8)
    edge_index = torch.stack([torch.randint(0, 5, (17,), generator=gen), torch.randint(0, targets - 1, (17,), generator=gen)])
    graph = graphfuse.Graph(edge_index, num_src=5, num_dst=targets)  # the last target has no in-edge
    ours, theirs = _pair(aggr, SAGE_PAIRS)
    x_src, x_dst = torch.randn(5, IN, generator=gen), torch.randn(targets, 3, generator=gen)
    leaves_ours = [t.clone().requires_grad_() for t in (x_src, x_dst)]
    leaves_theirs = [t.clone().requires_grad_() for t in (x_src, x_dst)]
    out = ours(tuple(leaves_ours), graph if graph_input == "graph" else edge_index)
    expected = theirs(tuple(leaves_theirs), edge_index, size=(5, targets))
    assert out.shape == (targets, OUT)
    torch.testing.assert_close(out, expected, **TOL)
    names, got, want = _grads(ours, theirs, out, expected, leaves_ours, leaves_theirs, allow_unused=True)
    for name, g_ours, g_theirs in zip(["x_src", "x_dst", *names], got, want):
        if g_theirs is None:  # x_dst without a root term
            assert g_ours is None, name
        else:
            torch.testing.assert_close(g_ours, g_theirs, **TOL, msg=lambda m, name=name: f"grad of {name}: {m}")


def test_sage_without_target_features_leaves_the_root_term_out_like_pyg():
    graph = make_graph_case("bipartite")
    ours, theirs = _pair("mean", SAGE_PAIRS)
    x_src = torch.randn(graph.num_src, IN)
    expected = theirs((x_src, None), graph.edge_index, size=(graph.num_src, graph.num_dst))
    torch.testing.assert_close(ours((x_src, None), graph), expected, **TOL)
    with pytest.raises(ValueError, match=r"SAGEConv: x = \(x_src, None\) leaves the number of targets open"):
        ours((x_src, None), graph.edge_index)


def test_sage_pair_inputs_are_checked():
    graph = make_graph_case("bipartite")
    conv, same = SAGEConv((IN, 3), OUT), SAGEConv(IN, OUT)
    x_src, x_dst = torch.randn(graph.num_src, IN), torch.randn(graph.num_dst, 3)
    with pytest.raises(ValueError, match=r"SAGEConv: in_channels=\(6, 3\) needs x = \(x_src, x_dst\)"):
        conv(x_src, graph)
    with pytest.raises(ValueError, match="SAGEConv: x must be a tensor or a pair"):
        conv((x_src, x_dst, x_dst), graph)
    with pytest.raises(ValueError, match=r"SAGEConv: x_dst must have shape \(N, in_channels=3\); got"):
        conv((x_src, x_src), graph)
    with pytest.raises(TypeError, match="SAGEConv: x_src must be a torch.Tensor; got list"):
        conv(([1.0], x_dst), graph)
    with pytest.raises(ValueError, match=rf"SAGEConv: x_dst must have one row per target node \(num_dst={graph.num_dst}\)"):
        conv((x_src, torch.randn(graph.num_dst + 1, 3)), graph)
    with pytest.raises(ValueError, match="SAGEConv: x_src must have one row per source node"):
        same((x_src[:-1], x_src[: graph.num_dst]), graph)
    with pytest.raises(ValueError, match="SAGEConv: in_channels must be an int >= 1; got 0"):
        SAGEConv((IN, 0), OUT)
    torch.testing.assert_close(same((x_src, x_src[: graph.num_dst]), graph), same(x_src, graph), rtol=0, atol=0)


@pytest.mark.parametrize("heads", [1, 4])
def test_gat_attention_dropout_matches_pyg_in_training(heads):
    torch.manual_seed(0)
    theirs = pyg_nn.GATConv(IN, OUT, heads=heads, dropout=0.5)
    ours = GATConv(IN, OUT, heads=heads, dropout=0.5)
    ours.load_state_dict(theirs.state_dict())
    graph = _graph("self_loops")
    x = torch.randn(graph.num_nodes, IN)
    torch.manual_seed(7)
    out_theirs = theirs(x, graph.edge_index)
    torch.manual_seed(7)
    out_ours = ours(x, graph)
    torch.testing.assert_close(out_ours, out_theirs, **TOL)
    torch.manual_seed(7)
    assert not torch.allclose(ours.eval()(x, graph), out_ours), "dropout had no effect in training mode"


@pytest.mark.parametrize("case", ["self_loops", "duplicates", "isolated", "no_edges"])
@pytest.mark.parametrize("conv", ["gat_h1", "gat_h4_concat", "gat_h4_mean", "gat_h1_mean_noloops"])
def test_gat_returns_attention_weights_like_pyg(conv, case):
    """``return_attention_weights=True``: PyG's ``(out, (edge_index, alpha))``, the same edges (self-loops
    included), coefficients, output and gradients; the output equals the call without it."""
    graph = _graph(case)
    ours, theirs = _pair(conv)
    x = torch.randn(graph.num_nodes, IN, generator=torch.Generator().manual_seed(5))
    x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    out, (edge_index, alpha) = ours(x_ours, graph, return_attention_weights=True)
    expected, (pyg_edge_index, pyg_alpha) = theirs(x_theirs, graph.edge_index, return_attention_weights=True)
    assert torch.equal(edge_index, pyg_edge_index)
    torch.testing.assert_close(alpha, pyg_alpha, **TOL)
    torch.testing.assert_close(out, expected, **TOL)
    torch.testing.assert_close(out, ours(x, graph), **TOL)
    grad_out, grad_alpha = torch.randn_like(expected), torch.randn_like(pyg_alpha)
    got = torch.autograd.grad((out, alpha), [x_ours, *ours.parameters()], (grad_out, grad_alpha))
    want = torch.autograd.grad((expected, pyg_alpha), [x_theirs, *theirs.parameters()], (grad_out, grad_alpha))
    for g_ours, g_theirs in zip(got, want):
        torch.testing.assert_close(g_ours, g_theirs, **TOL)


def test_gat_returns_the_attention_weights_it_summed_in_training():
    """With attention dropout, the returned coefficients are the dropped-out ones the output summed (PyG's too)."""
    torch.manual_seed(0)
    theirs = pyg_nn.GATConv(IN, OUT, heads=4, dropout=0.5)
    ours = GATConv(IN, OUT, heads=4, dropout=0.5)
    ours.load_state_dict(theirs.state_dict())
    graph = _graph("self_loops")
    x = torch.randn(graph.num_nodes, IN)
    torch.manual_seed(7)
    out, (edge_index, alpha) = ours(x, graph, return_attention_weights=True)
    torch.manual_seed(7)
    expected, (_, pyg_alpha) = theirs(x, graph.edge_index, return_attention_weights=True)
    torch.testing.assert_close(alpha, pyg_alpha, **TOL)
    torch.testing.assert_close(out, expected, **TOL)
    assert (alpha == 0).any(), "dropout had no effect in training mode"
    h = ours.lin(x).view(-1, 4, OUT)
    summed = graphfuse.aggregate(graphfuse.Graph(edge_index, num_nodes=graph.num_nodes), h, alpha)
    torch.testing.assert_close(out, summed.reshape(graph.num_nodes, -1) + ours.bias, **TOL)


@pytest.mark.parametrize("conv", sorted(CONVS))
def test_conv_under_autocast_matches_pyg(conv):
    """Under bfloat16 autocast PyG's GAT and GCN sum h_j * alpha and w * h_j in float32; ours summed the bfloat16
    features and returned bfloat16 when the layer had no bias to promote the result."""
    ours, theirs = _pair(conv)
    graph = _graph("self_loops") if "noloops" in conv else make_graph_case("duplicates")
    x = torch.randn(graph.num_nodes, IN, generator=torch.Generator().manual_seed(3))
    x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out_ours, out_theirs = ours(x_ours, graph), theirs(x_theirs, *_pyg_args(conv, graph))
    torch.testing.assert_close(out_ours, out_theirs, **TOL)  # dtype included
    # PyG sums the two bfloat16 gradients of h (scores and messages) in bfloat16, ours in float32: the gradients
    # of x and the linear weight agree to bfloat16's rounding
    names, got, want = _grads(ours, theirs, out_ours, out_theirs, [x_ours], [x_theirs])
    for name, g_ours, g_theirs in zip(["x", *names], got, want):
        torch.testing.assert_close(g_ours, g_theirs, rtol=1.6e-2, atol=1e-2, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.gpu
@pytest.mark.parametrize("backend", [None, "gespmm", "gar", "gas", "hpspmm"])
def test_gcn_under_autocast_on_cuda_sums_in_float32(backend):
    """Under CUDA autocast GCNConv hands the kernels float32 features (they refused bfloat16 ones)."""
    graph = _graph("weighted").to("cuda")
    x = torch.randn(graph.num_nodes, IN, generator=torch.Generator().manual_seed(4)).to("cuda")
    torch.manual_seed(0)
    conv = GCNConv(IN, OUT, bias=False).to("cuda")
    results = []
    for name in (backend, "reference"):
        conv.backend = name
        x_grad = x.clone().requires_grad_()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = conv(x_grad, graph)
        assert out.dtype == torch.float32
        results.append((out, *torch.autograd.grad(out.square().sum(), [x_grad, conv.lin.weight])))
    out, *grads = results[0]
    torch.testing.assert_close(out, results[1][0], **TOL)
    for got, want in zip(grads, results[1][1:]):  # through the bfloat16 product's backward: sums of another order
        torch.testing.assert_close(got, want, rtol=2**-7, atol=2**-7 * want.abs().max().item())  # may round apart


def test_gat_return_attention_weights_takes_a_bool_or_none():
    graph, conv = _graph("duplicates"), GATConv(IN, OUT, heads=2)
    x = torch.randn(graph.num_nodes, IN)
    for off in (None, False):
        assert isinstance(conv(x, graph, return_attention_weights=off), torch.Tensor)
    with pytest.raises(TypeError, match="GATConv: return_attention_weights must be a bool; got 1"):
        conv(x, graph, return_attention_weights=1)


@pytest.mark.parametrize("gat_heads", [1, 3])
def test_gat_output_shapes(gat_heads):
    graph = make_graph_case("unsorted")
    x = torch.randn(graph.num_nodes, IN)
    assert GATConv(IN, OUT, gat_heads)(x, graph).shape == (graph.num_nodes, gat_heads * OUT)
    assert GATConv(IN, OUT, gat_heads, concat=False)(x, graph).shape == (graph.num_nodes, OUT)


def test_gcn_norm_is_built_once_per_graph(monkeypatch):
    calls = []
    real = processing.gcn_norm

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(processing, "gcn_norm", counting)
    graph = make_graph_case("duplicates")
    conv = GCNConv(IN, OUT)
    x = torch.randn(graph.num_nodes, IN)
    first = conv(x, graph)
    key = ("gcn_norm", True, False)
    cached = graph.cached(key, lambda: pytest.fail("gcn_norm was not cached under its key"))
    second = conv(x, graph)
    assert graph.cached(key, lambda: None) is cached
    assert len(calls) == 1
    torch.testing.assert_close(first, second)
    conv(x, graph.edge_index)
    assert len(calls) == 2, "an edge_index input is normalised per call"


def test_gat_self_loops_are_cached_per_graph():
    graph = make_graph_case("duplicates")
    conv = GATConv(IN, OUT, heads=2)
    x = torch.randn(graph.num_nodes, IN)
    conv(x, graph)
    key = ("add_remaining_self_loops", 1.0)
    looped = graph.cached(key, lambda: pytest.fail("self-loops were not cached"))
    conv(x, graph)
    assert graph.cached(key, lambda: None) is looped
    assert looped.num_edges == int((graph.edge_index[0] != graph.edge_index[1]).sum()) + graph.num_nodes


@pytest.mark.parametrize(("conv", "ops"), [("gcn", ["aggregate"]), ("gat_h4_concat", ["edge_softmax", "aggregate"]),
                                          ("sage_pool", ["aggregate"])])
def test_explicit_backend_is_used(conv, ops):
    """Every engine op of the layer runs on its ``backend``: a spy backend (the reference's ops, recording their
    calls) sees them all, and gives the default's result (on CPU the reference's, so the result alone could not
    tell which backend ran)."""
    graph = make_graph_case("isolated")
    x = torch.randn(graph.num_nodes, IN)
    ours, _ = _pair(conv)
    expected = ours(x, graph)
    calls = []

    def spy(name, fn):
        def op(*args, **kwargs):
            calls.append(name)
            return fn(*args, **kwargs)
        return op

    reference = {"aggregate": graphfuse.engine.reference.aggregate, "sddmm": graphfuse.engine.reference.sddmm,
                 "edge_softmax": graphfuse.engine.reference.edge_softmax}
    graphfuse.engine.register_backend(graphfuse.engine.Backend(
        name="spy", ops={name: spy(name, fn) for name, fn in reference.items()}, devices=frozenset({"cpu"}),
        priority=-200))
    try:
        ours.backend = "spy"
        torch.testing.assert_close(ours(x, graph), expected)
        assert calls == ops
    finally:
        graphfuse.engine.unregister_backend("spy")
    ours.backend = "no-such-backend"
    with pytest.raises(ValueError, match="no-such-backend"):
        ours(x, graph)


@pytest.mark.parametrize("conv", ["gcn", "gat_h4_concat", "sage_mean"])
def test_bad_inputs_raise_naming_the_argument(conv):
    ours, _ = _pair(conv)
    graph = make_graph_case("isolated")
    n = graph.num_nodes
    with pytest.raises(ValueError, match=r"x must have one row per source node \(num_src=10\)"):
        ours(torch.randn(n - 1, IN), graph)
    with pytest.raises(ValueError, match=r"edge_index does not fit x"):
        ours(torch.randn(3, IN), graph.edge_index)
    with pytest.raises(ValueError, match=r"x must have shape \(N, in_channels=6\)"):
        ours(torch.randn(n, IN + 1), graph)
    with pytest.raises(TypeError, match="x must be floating point"):
        ours(torch.ones(n, IN, dtype=torch.long), graph)
    with pytest.raises(TypeError, match="graph must be a graphfuse.Graph or an edge_index"):
        ours(torch.randn(n, IN), graph.edge_index.tolist())


@pytest.mark.parametrize("conv", ["gcn", "gat_h1"])
def test_self_loop_convs_refuse_bipartite_blocks(conv):
    ours, _ = _pair(conv)
    graph = make_graph_case("bipartite")
    with pytest.raises(ValueError, match="graph must be square"):
        ours(torch.randn(graph.num_src, IN), graph)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="aggr"):
        SAGEConv(IN, OUT, aggr="lstm")
    with pytest.raises(ValueError, match="heads"):
        GATConv(IN, OUT, heads=0)
    with pytest.raises(ValueError, match="dropout"):
        GATConv(IN, OUT, dropout=1.0)


@pytest.mark.parametrize("cls", [GCNConv, SAGEConv, GraphSAINTConv, GATConv])
def test_convs_check_the_backend_name_when_built(cls):
    """A typo in backend= was found only at the first forward pass (after the model was built and trained on)."""
    with pytest.raises(ValueError, match=f"{cls.__name__}: unknown backend 'gesmpm'; valid: .*'reference'"):
        cls(IN, OUT, backend="gesmpm")
    with pytest.raises(TypeError, match=f"{cls.__name__}: backend must be a backend name \\(str\\); got list"):
        cls(IN, OUT, backend=["reference"])
    for name in (None, "auto", "reference", "gespmm"):
        assert cls(IN, OUT, backend=name).backend == name
    if cls is GATConv:
        assert cls(IN, OUT, backend="fused").backend == "fused"
    else:
        with pytest.raises(ValueError, match="unknown backend 'fused'"):
            cls(IN, OUT, backend="fused")


@pytest.mark.parametrize("cls", [GCNConv, SAGEConv, GraphSAINTConv])
def test_convs_name_bad_widths(cls):
    """A width of 0 built a layer whose output ignored x (or was 0 wide), -1 failed inside torch, True was 1;
    a NumPy bool is no width either."""
    np = pytest.importorskip("numpy")
    for bad in (0, -1, 2.5, True, np.bool_(True)):
        with pytest.raises(ValueError, match=f"{cls.__name__}: in_channels must be an int >= 1; got {bad!r}"):
            cls(bad, OUT)
        with pytest.raises(ValueError, match=f"{cls.__name__}: out_channels must be an int >= 1; got {bad!r}"):
            cls(IN, bad)


def test_glorot_init_bounds_like_pyg():
    conv = GATConv(40, 10, heads=3)
    assert conv.att_src.abs().max() <= (6 / (3 + 10)) ** 0.5
    assert conv.lin.weight.abs().max() <= (6 / (40 + 30)) ** 0.5
    assert conv.att_src.abs().max() > 0.5 * (6 / (3 + 10)) ** 0.5
    assert torch.count_nonzero(conv.bias) == 0


def _dropped_self_loops(graph: graphfuse.Graph) -> torch.Tensor:
    """The duplicate self-loops that GCN's normalisation drops (it keeps each node's last one): PyG also sends
    the kept loop's gradient to them, although the output does not depend on them."""
    src, dst = graph.edge_index
    position = torch.arange(graph.num_edges).masked_fill(src != dst, -1)
    kept = torch.full((graph.num_nodes,), -1).scatter_reduce(0, src, position, "amax")
    return (src == dst) & (position != kept[src])


@pytest.mark.parametrize("graph_input", ["graph", "edge_index"])
@pytest.mark.parametrize("case", ["weighted", "self_loops", "duplicates", "isolated", "no_edges"])
@pytest.mark.parametrize("conv", ["gcn", "gcn_improved", "gcn_improved_noloops"])
def test_gcn_edge_weight_argument_matches_pyg(conv, case, graph_input):
    """``GCNConv(x, edge_index, edge_weight)`` as in PyG: values and the gradients of x, the layer's parameters
    and the weights; on a Graph the call's weights take the place of the graph's own (the weighted case holds
    other ones), which stay as they were."""
    graph = _graph(case)
    own = graph.edge_weight
    ours, theirs = _pair(conv)
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(graph.num_nodes, IN, generator=gen)
    w = torch.rand(graph.num_edges, generator=gen) + 0.1
    w_ours, w_theirs = w.clone().requires_grad_(), w.clone().requires_grad_()
    out = ours(x, graph if graph_input == "graph" else graph.edge_index, w_ours)
    expected = theirs(x, graph.edge_index, w_theirs)
    torch.testing.assert_close(out, expected, **TOL)
    _, got, want = _grads(ours, theirs, out, expected, [w_ours], [w_theirs])
    dropped = _dropped_self_loops(graph) if ours.add_self_loops else torch.zeros(graph.num_edges, dtype=torch.bool)
    torch.testing.assert_close(got[0][~dropped], want[0][~dropped], **TOL)
    assert (got[0][dropped] == 0).all()
    for g_ours, g_theirs in zip(got[1:], want[1:]):
        torch.testing.assert_close(g_ours, g_theirs, **TOL)
    assert graph.edge_weight is own
    if case == "weighted":  # the graph's own weights give another result: the call's were used
        assert not torch.allclose(ours(x, graph), out)


@pytest.mark.gpu
@pytest.mark.parametrize("learned", [False, True])
def test_gcn_edge_weight_argument_on_cuda_matches_cpu(learned):
    """The call's weights on CUDA: the graph-processing stage normalises fixed ones, the reference learned ones."""
    graph = _graph("self_loops")
    gen = torch.Generator().manual_seed(6)
    x, w = torch.randn(graph.num_nodes, IN, generator=gen), torch.rand(graph.num_edges, generator=gen) + 0.1
    results = []
    for device in ("cpu", "cuda"):  # a layer and weights of their own on each device (no moved .grad)
        conv = _pair("gcn")[0].to(device)
        weights = w.to(device, copy=True).requires_grad_(learned)
        out = conv(x.to(device), graph.to(device), weights)
        out.square().sum().backward()
        results.append([t.cpu() for t in (out, conv.lin.weight.grad, *([weights.grad] if learned else []))])
    for got, want in zip(*reversed(results)):
        torch.testing.assert_close(got, want, **TOL)


@pytest.mark.parametrize("graph_input", ["graph", "edge_index", "edge_weight"])
@pytest.mark.parametrize("case", ["weighted", "self_loops", "isolated", "no_edges", "bipartite"])
def test_gcn_without_normalisation_matches_pyg(case, graph_input):
    """``normalize=False``: the plain weighted sum (self-loops only as the graph has them), on bipartite blocks
    too; add_self_loops follows normalize unless given."""
    graph = _graph(case)
    torch.manual_seed(0)
    ours, theirs = GCNConv(IN, OUT, normalize=False), pyg_nn.GCNConv(IN, OUT, normalize=False)
    ours.load_state_dict(theirs.state_dict())
    assert not ours.add_self_loops and GCNConv(IN, OUT).add_self_loops
    x = torch.randn(graph.num_src, IN, generator=torch.Generator().manual_seed(9))
    w = {"graph": graph.edge_weight, "edge_index": None, "edge_weight": torch.rand(graph.num_edges) + 0.1}[graph_input]
    target = graph if graph_input == "graph" else graph.edge_index
    if graph_input != "graph" and case == "bipartite":
        target = graphfuse.Graph(graph.edge_index, num_src=graph.num_src, num_dst=graph.num_dst)
    out = ours(x, target, w if graph_input == "edge_weight" else None)
    if case == "bipartite":  # PyG's GCNConv takes square graphs only: the sum by hand
        src, dst = graph.edge_index
        messages = theirs.lin(x)[src] * (1.0 if w is None else w.unsqueeze(1))
        expected = torch.zeros(graph.num_dst, OUT).index_add_(0, dst, messages) + theirs.bias
    else:
        expected = theirs(x, graph.edge_index, w)
    assert out.shape == (graph.num_dst, OUT)
    torch.testing.assert_close(out, expected, **TOL)
    with pytest.raises(ValueError, match="GCNConv: add_self_loops=True needs normalize=True"):
        GCNConv(IN, OUT, normalize=False, add_self_loops=True)


def test_gcn_edge_weight_argument_under_vmap_matches_a_loop():
    """torch.func.vmap over the call's weights (an ensemble of weightings), as PyG's GCNConv allows: the degree
    count wrote in place into an unbatched tensor, which vmap refuses."""
    graph = _graph("self_loops")
    gen = torch.Generator().manual_seed(8)
    x, weights = torch.randn(graph.num_nodes, IN, generator=gen), torch.rand(3, graph.num_edges, generator=gen)
    conv = _pair("gcn")[0]
    batched = torch.func.vmap(lambda w: conv(x, graph.edge_index, w))(weights)
    torch.testing.assert_close(batched, torch.stack([conv(x, graph.edge_index, w) for w in weights]), **TOL)


def test_gcn_edge_weight_argument_is_checked_by_the_layer():
    graph, conv = _graph("duplicates"), GCNConv(IN, OUT)
    x = torch.randn(graph.num_nodes, IN)
    with pytest.raises(ValueError, match=rf"GCNConv: .*edge_weight must have shape \(E={graph.num_edges},\); got \(3,\)"):
        conv(x, graph.edge_index, torch.rand(3))
    with pytest.raises(TypeError, match="GCNConv: .*edge_weight must be a floating-point torch.Tensor; got torch.int64"):
        conv(x, graph, torch.ones(graph.num_edges, dtype=torch.long))
    with pytest.raises(TypeError, match="GCNConv: .*edge_weight must be a floating-point torch.Tensor; got list"):
        conv(x, graph, [1.0] * graph.num_edges)


def test_gcn_trains_learned_edge_weights_like_pyg():
    """Edge weights that require grad: normalised per call (never cached with a stale autograd graph), and their
    gradient flows through the normalisation as in PyG, over several optimiser steps."""
    graph = _graph("weighted")
    torch.manual_seed(0)
    conv, ref = GCNConv(IN, OUT), pyg_nn.GCNConv(IN, OUT)
    ref.lin.weight.data.copy_(conv.lin.weight.data)
    ref.bias.data.copy_(conv.bias.data)
    x = torch.randn(graph.num_nodes, IN)
    w = torch.nn.Parameter(graph.edge_weight.clone())
    w_ref = torch.nn.Parameter(graph.edge_weight.clone())
    learned = graphfuse.Graph(graph.edge_index, num_nodes=graph.num_nodes, edge_weight=w)
    dropped = _dropped_self_loops(graph)  # duplicate self-loops: the forward uses the last one only
    assert dropped.any()
    opt, opt_ref = torch.optim.SGD([w], lr=0.05), torch.optim.SGD([w_ref], lr=0.05)
    for _ in range(3):
        out, expected = conv(x, learned), ref(x, graph.edge_index, w_ref)
        torch.testing.assert_close(out, expected, **TOL)
        out.square().mean().backward()
        expected.square().mean().backward()
        # PyG also sends the kept loop's gradient to the dropped duplicates, which the output does not depend on
        torch.testing.assert_close(w.grad[~dropped], w_ref.grad[~dropped], **TOL)
        assert (w.grad[dropped] == 0).all()
        assert w.grad.abs().sum() > 0
        for o in (opt, opt_ref):
            o.step()
            o.zero_grad()


def test_gcn_float64_on_an_unweighted_graph_is_normalised_in_float64():
    graph = make_graph_case("duplicates")
    conv, ref = GCNConv(IN, OUT).double(), pyg_nn.GCNConv(IN, OUT).double()
    ref.lin.weight.data.copy_(conv.lin.weight.data)
    x = torch.randn(graph.num_nodes, IN, dtype=torch.float64)
    torch.testing.assert_close(conv(x, graph), ref(x, graph.edge_index), rtol=1e-13, atol=1e-13)


def test_gat_conv_names_bad_arguments_and_caches_one_unweighted_graph():
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match=f"GATConv: heads must be an int >= 1; got {bad!r}"):
            GATConv(IN, OUT, bad)
    with pytest.raises(TypeError, match="GATConv: dropout must be a real number; got '0.5'"):
        GATConv(IN, OUT, dropout="0.5")
    graph = _graph("weighted")  # GAT ignores edge weights: learned ones must not defeat the self-loop cache
    learned = graphfuse.Graph(graph.edge_index, num_nodes=graph.num_nodes,
                              edge_weight=graph.edge_weight.clone().requires_grad_())
    conv, x = GATConv(IN, OUT, heads=2), torch.randn(graph.num_nodes, IN)
    torch.testing.assert_close(conv(x, learned), conv(x, graph))
    view = learned.cached("unweighted", lambda: None)
    assert view.edge_weight is None and view.cached(("add_remaining_self_loops", 1.0), lambda: None) is not None


def test_gcn_half_precision_counts_degrees_in_the_default_dtype():
    """Degrees counted in bfloat16 stop at 256: a bfloat16 model keeps float32 normalisation weights."""
    n = 1001
    star = graphfuse.Graph(torch.stack([torch.arange(1, n), torch.zeros(n - 1, dtype=torch.long)]), num_nodes=n)
    conv = GCNConv(IN, OUT)
    assert conv.normalized(star, torch.bfloat16).edge_weight.dtype == torch.float32
    x = torch.randn(n, IN)
    torch.testing.assert_close(conv.to(torch.bfloat16)(x.bfloat16(), star).float(), conv.float()(x, star),
                               rtol=0.05, atol=0.05)


def test_gcn_float64_model_after_a_float32_call_on_the_same_graph():
    """The float32 normalisation cached by a first call was reused by a float64 model once torch's default dtype
    was float64 (the unit weights were made only when x's dtype beat the default): ~1e-7 off in float64."""
    graph = graphfuse.Graph(torch.randint(0, 50, (2, 400), generator=torch.Generator().manual_seed(0)), num_nodes=50)
    conv = GCNConv(IN, OUT)
    conv(torch.randn(50, IN), graph)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        conv = conv.double()
        x = torch.randn(50, IN)
        out, fresh = conv(x, graph), conv(x, graphfuse.Graph(graph.edge_index, num_nodes=50))
    finally:
        torch.set_default_dtype(previous)
    assert out.dtype == torch.float64 and torch.equal(out, fresh)


@pytest.mark.parametrize(
    ("build", "arg"),
    [
        (lambda v: GCNConv(IN, OUT, improved=v), "improved"),
        (lambda v: GCNConv(IN, OUT, add_self_loops=v), "add_self_loops"),
        (lambda v: GCNConv(IN, OUT, bias=v), "bias"),
        (lambda v: GCNConv(IN, OUT, normalize=v), "normalize"),
        (lambda v: GATConv(IN, OUT, 2, concat=v), "concat"),
        (lambda v: GATConv(IN, OUT, add_self_loops=v), "add_self_loops"),
        (lambda v: GATConv(IN, OUT, bias=v), "bias"),
        (lambda v: SAGEConv(IN, OUT, root_weight=v), "root_weight"),
        (lambda v: SAGEConv(IN, OUT, normalize=v), "normalize"),
        (lambda v: SAGEConv(IN, OUT, bias=v), "bias"),
        (lambda v: GraphSAINTConv(IN, OUT, bias=v), "bias"),
    ],
)
def test_switches_must_be_bools(build, arg):
    """A string switch is truthy: concat="false" concatenated the heads, bias="no" built a bias, silently."""
    for bad in ("false", 0, None):
        if bad is None and build(True).__class__ is GCNConv and arg == "add_self_loops":
            continue  # GCNConv's None means "as normalize", as PyG's (test_gcn_without_normalisation_matches_pyg)
        with pytest.raises(TypeError, match=rf"{arg} must be a bool; got {bad!r}"):
            build(bad)


def test_gat_negative_slope_must_be_a_number():
    """A str slope was accepted and failed only in the first forward pass, inside torch's leaky_relu."""
    for bad in ("0.2", True, None):
        with pytest.raises(TypeError, match=rf"GATConv: negative_slope must be a real number; got {bad!r}"):
            GATConv(IN, OUT, negative_slope=bad)
    for bad in (float("nan"), float("inf")):  # accepted: every output NaN (review)
        with pytest.raises(ValueError, match=rf"GATConv: negative_slope must be a finite real number; got {bad!r}"):
            GATConv(IN, OUT, negative_slope=bad)


@pytest.mark.parametrize("cls", [GCNConv, SAGEConv, GATConv, GraphSAINTConv])
def test_numpy_widths_and_slope_are_accepted(cls):
    """NumPy integers (e.g. a width computed from an array's shape) built these layers before the width checks
    (GraphSAINTConv refused them: its own check took Python ints only); a NumPy float slope was accepted by
    GATConv before the slope check."""
    np = pytest.importorskip("numpy")
    extra = {"negative_slope": np.float32(0.1)} if cls is GATConv else {}
    conv = cls(np.int64(IN), np.int64(OUT), **extra)
    g = _graph("weighted")
    x = torch.randn(g.num_src, IN)
    reference = cls(IN, OUT, **({"negative_slope": 0.1} if cls is GATConv else {}))
    reference.load_state_dict(conv.state_dict())
    torch.testing.assert_close(conv(x, g), reference(x, g))


def test_gat_without_self_loops_names_the_square_requirement():
    g = graphfuse.Graph(torch.tensor([[0, 4, 2], [0, 1, 2]]), num_src=5, num_dst=3)
    with pytest.raises(ValueError, match="GATConv: graph must be square"):
        GATConv(4, 3, add_self_loops=False)(torch.randn(5, 4), g)


IN = 6


@pytest.mark.parametrize("cls", [GCNConv, SAGEConv, GATConv, GraphSAINTConv])
def test_layers_name_features_on_another_device_than_the_graph(cls):
    """The layer names the mismatch (mutant L04 dropped as_graph's device check: the error then came from an
    inner op, or a weight, naming neither the layer nor x). The meta device stands in for CUDA."""
    conv = cls(IN, 4)
    graph = make_graph_case("isolated")
    with pytest.raises(ValueError, match=rf"{cls.__name__}: x is on meta but the graph is on cpu"):
        conv(torch.randn(graph.num_nodes, IN, device="meta"), graph)


@pytest.mark.parametrize("learned_weights", [False, True])
def test_cpu_gradients_are_bitwise_reproducible(learned_weights):
    """The reference backend is deterministic on CPU, so a layer's gradients are too: GAT's attention terms were
    gathered by advanced indexing (and gcn_norm's degree factors), whose backward sums in a varying order on a
    multi-threaded CPU (up to 3e-8 apart between two identical runs; resumed runs differed from straight ones)."""
    n, e = 2000, 200_000
    gen = torch.Generator().manual_seed(0)
    edge_index = torch.randint(0, n, (2, e), generator=gen)
    x = torch.randn(n, 8, generator=gen)
    weight = torch.rand(e, generator=gen) + 0.5
    conv = GCNConv(8, 4) if learned_weights else GATConv(8, 4, heads=2)
    grads = []
    for _ in range(6):
        w = weight.clone().requires_grad_(True) if learned_weights else None
        g = graphfuse.Graph(edge_index, num_nodes=n, edge_weight=w)
        conv.zero_grad()
        out = conv(x, g)
        out.backward(torch.arange(out.numel(), dtype=out.dtype).view_as(out) % 7)
        grads.append([p.grad.clone() for p in conv.parameters()] + ([w.grad] if learned_weights else []))
    for other in grads[1:]:
        assert all(torch.equal(a, b) for a, b in zip(grads[0], other))


@pytest.mark.parametrize("conv", ["gcn", "saint"])
def test_the_linear_output_is_freed_before_the_bias_add(conv, monkeypatch):
    """GCNConv and GraphSAINTConv (narrowing) aggregate their linear output and then add the bias: under no_grad
    nothing needs that (N, out) tensor after the aggregation, so no name may keep it alive through the add (an
    eval forward held three hidden-width tensors at once instead of two; 48 MiB at 200,000 nodes x 64)."""
    module = __import__(f"graphfuse.nn.{conv}_conv", fromlist=["aggregate"])
    layer = GCNConv(IN, 3) if conv == "gcn" else GraphSAINTConv(IN, 2, aggr="sum")
    linear = layer.lin if conv == "gcn" else layer.lin_neigh
    seen, alive_at_add = [], []

    class Probe(torch.Tensor):
        def __add__(self, other):
            alive_at_add.append(seen[0]() is not None)
            return torch.Tensor.__add__(self.as_subclass(torch.Tensor), other)

    real = module.aggregate
    monkeypatch.setattr(module, "aggregate", lambda *a, **k: real(*a, **k).as_subclass(Probe))
    if conv == "gcn":
        linear.register_forward_hook(lambda mod, args, out: seen.append(weakref.ref(out)))
    else:  # GraphSAINTConv applies lin_neigh's weight through F.linear; watch what the aggregation gets
        monkeypatch.setattr(module, "weighted_sum_dtype", lambda h, graph: seen.append(weakref.ref(h)) or h)
    graph = _graph("duplicates")
    with torch.no_grad():
        layer(torch.randn(graph.num_nodes, IN), graph)
    assert len(seen) == 1 and alive_at_add == [False]
