"""GraphSAINTConv against a hand-written dense formula; the GraphSAINT model: shapes, jk, training, bad inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import graphfuse
from cases import TOLERANCES, make_graph_case, planted_communities, train_steps
from graphfuse.nn import MODELS, GraphSAINT, GraphSAINTConv

TOL64 = TOLERANCES[torch.float64]
IN, HIDDEN, OUT = 7, 8, 3


def _graph(name: str, device) -> graphfuse.Graph:
    """make_graph_case graphs plus weighted ones (weighted duplicates, a weighted bipartite block)."""
    if name.startswith("weighted_"):
        base = make_graph_case(name.removeprefix("weighted_"))
        gen = torch.Generator().manual_seed(2)
        weight = torch.rand(base.num_edges, generator=gen, dtype=torch.float64) + 0.1
        base = graphfuse.Graph(base.edge_index, edge_weight=weight, num_src=base.num_src, num_dst=base.num_dst)
    else:
        base = make_graph_case(name)
    return base.to(device)


def _dense_conv(conv: GraphSAINTConv, x, graph) -> torch.Tensor:
    """``[x_dst W_s^T + b_s ‖ Â x W_n^T + b_n]`` with ``Â`` the dense (mean-normalised) weighted adjacency."""
    src, dst = graph.edge_index.tolist()
    weight = [1.0] * len(src) if graph.edge_weight is None else graph.edge_weight.tolist()
    adj = torch.zeros(graph.num_dst, graph.num_src, dtype=torch.float64)
    degree = torch.zeros(graph.num_dst, dtype=torch.float64)
    for j, i, w in zip(src, dst, weight):
        adj[i, j] += w
        degree[i] += 1
    if conv.aggr == "mean":
        adj = adj / degree.clamp(min=1).unsqueeze(1)
    x = x.detach().cpu()
    s, n = conv.lin_self, conv.lin_neigh
    self_half = x[: graph.num_dst] @ s.weight.detach().cpu().T
    neigh_half = adj @ x @ n.weight.detach().cpu().T
    if s.bias is not None:
        self_half = self_half + s.bias.detach().cpu()
        neigh_half = neigh_half + n.bias.detach().cpu()
    return torch.cat([self_half, neigh_half], dim=1)


@pytest.mark.parametrize(
    "case", ["isolated", "duplicates", "no_edges", "single_node", "bipartite", "weighted_duplicates",
             "weighted_isolated", "weighted_bipartite"],
)
@pytest.mark.parametrize("aggr", ["mean", "sum"])
@pytest.mark.parametrize(("in_channels", "out_channels", "bias"), [(IN, 3, True), (3, IN, True), (IN, 3, False)])
def test_conv_matches_dense_formula(device, case, aggr, in_channels, out_channels, bias):
    torch.manual_seed(0)
    graph = _graph(case, device)
    conv = GraphSAINTConv(in_channels, out_channels, aggr=aggr, bias=bias).double().to(device)
    if bias:  # the reference init zeroes the biases; give them values so the test sees them
        with torch.no_grad():
            conv.lin_self.bias.normal_()
            conv.lin_neigh.bias.normal_()
    x = torch.randn(graph.num_src, in_channels, dtype=torch.float64, device=device)
    out = conv(x, graph)
    assert out.shape == (graph.num_dst, 2 * out_channels)
    torch.testing.assert_close(out.cpu(), _dense_conv(conv, x, graph), **TOL64)


def test_conv_edge_index_input_is_the_unweighted_graph():
    torch.manual_seed(0)
    graph = _graph("weighted_duplicates", "cpu")
    conv = GraphSAINTConv(IN, 4).double()
    x = torch.randn(graph.num_nodes, IN, dtype=torch.float64)
    unweighted = graphfuse.Graph(graph.edge_index, num_nodes=graph.num_nodes)
    torch.testing.assert_close(conv(x, graph.edge_index), conv(x, unweighted), **TOL64)
    assert not torch.allclose(conv(x, graph), conv(x, unweighted))


@pytest.mark.parametrize("aggr", ["mean", "sum"])
@pytest.mark.parametrize(("in_channels", "out_channels"), [(4, 2), (2, 4)])
def test_conv_gradcheck(aggr, in_channels, out_channels):
    torch.manual_seed(0)
    edge_index = torch.tensor([[0, 1, 2, 2, 3, 0], [1, 2, 0, 0, 1, 3]])
    conv = GraphSAINTConv(in_channels, out_channels, aggr=aggr).double()
    names = [name for name, _ in conv.named_parameters()]
    params = tuple(p.detach().clone().normal_().requires_grad_() for p in conv.parameters())
    x = torch.randn(5, in_channels, dtype=torch.float64, requires_grad=True)
    weight = (torch.rand(6, dtype=torch.float64) + 0.5).requires_grad_()

    def run(x, weight, *params):
        graph = graphfuse.Graph(edge_index, num_nodes=5, edge_weight=weight)
        return torch.func.functional_call(conv, dict(zip(names, params)), (x, graph))

    assert torch.autograd.gradcheck(run, (x, weight, *params))


@pytest.mark.parametrize("jk", [False, True])
@pytest.mark.parametrize("num_layers", [1, 3])
@pytest.mark.parametrize("norm", [None, "batch", "layer"])
def test_model_shapes(jk, num_layers, norm):
    graph = make_graph_case("isolated")
    model = GraphSAINT(IN, HIDDEN, OUT, num_layers=num_layers, norm=norm, jk=jk)
    out = model(torch.randn(graph.num_nodes, IN), graph)
    assert out.shape == (graph.num_nodes, OUT)
    assert torch.isfinite(out).all()
    assert [(c.in_channels, c.out_channels) for c in model.convs] == [(IN, HIDDEN)] + [
        (2 * HIDDEN, HIDDEN)
    ] * (num_layers - 1)
    assert model.classifier.in_features == 2 * HIDDEN * (num_layers if jk else 1)
    assert (model.norms is None) == (norm is None)
    if norm is not None:
        assert len(model.norms) == num_layers


def test_model_forward_matches_hand_stacked_layers():
    torch.manual_seed(0)
    graph = make_graph_case("duplicates")
    x = torch.randn(graph.num_nodes, IN)
    for jk in (False, True):
        model = GraphSAINT(IN, HIDDEN, OUT, num_layers=2, jk=jk, aggr="sum", activation="elu").eval()
        h1 = F.elu(model.convs[0](x, graph))
        h2 = F.elu(model.convs[1](h1, graph))
        emb = torch.cat([h1, h2], 1) if jk else h2
        expected = model.classifier(F.normalize(emb, dim=1))
        torch.testing.assert_close(model(x, graph), expected, **TOLERANCES[torch.float32])
    plain = GraphSAINT(IN, HIDDEN, OUT, normalize=False).eval()
    h = F.relu(plain.convs[1](F.relu(plain.convs[0](x, graph)), graph))
    torch.testing.assert_close(plain(x, graph.edge_index), plain.classifier(h), **TOLERANCES[torch.float32])


def test_registry_and_kwargs_reach_every_conv():
    assert MODELS["saint"] is GraphSAINT
    model = MODELS["saint"](IN, HIDDEN, OUT, num_layers=3, aggr="sum", bias=False, backend="reference")
    assert [(c.aggr, c.backend, c.lin_self.bias) for c in model.convs] == [("sum", "reference", None)] * 3


@pytest.mark.parametrize("kwargs", [{}, {"jk": True, "norm": "batch"}, {"aggr": "sum", "num_layers": 3}])
def test_trains_on_planted_problem(kwargs):
    torch.manual_seed(0)
    x, y, graph = planted_communities(IN)
    if kwargs.get("aggr") == "sum":  # normalised weights for "sum": the mean normalisation 1 / deg(target)
        weight = 1.0 / graph.in_degree.float()[graph.edge_index[1]]
        graph = graphfuse.Graph(graph.edge_index, num_nodes=graph.num_nodes, edge_weight=weight)
    model = GraphSAINT(IN, HIDDEN, 2, dropout=0.2, **kwargs)
    before, after, _ = train_steps(model, x, y, graph)
    assert after < 0.2 * before, (before, after)
    model.eval()
    assert (model(x, graph).argmax(1) == y).float().mean() > 0.9


def test_bad_inputs_raise_naming_the_argument():
    graph = make_graph_case("isolated")
    conv = GraphSAINTConv(IN, 4)
    with pytest.raises(ValueError, match="aggr"):
        GraphSAINTConv(IN, 4, aggr="max")
    with pytest.raises(ValueError, match="in_channels"):
        GraphSAINTConv(0, 4)
    with pytest.raises(ValueError, match="out_channels"):
        GraphSAINTConv(IN, 2.5)
    with pytest.raises(ValueError, match=r"x must have shape \(N, in_channels=7\)"):
        conv(torch.randn(graph.num_nodes, IN + 1), graph)
    with pytest.raises(ValueError, match="x must have one row per source node"):
        conv(torch.randn(graph.num_nodes + 1, IN), graph)
    with pytest.raises(ValueError, match="edge_index"):
        conv(torch.randn(3, IN), torch.tensor([[0, 5], [1, 2]]))
    block = graphfuse.Graph(torch.tensor([[0, 1], [3, 2]]), num_src=2, num_dst=4)
    with pytest.raises(ValueError, match="num_dst <= num_src"):
        conv(torch.randn(2, IN), block)
    for kwargs, argument in [
        ({"num_layers": 0}, "num_layers"), ({"dropout": 1.0}, "dropout"), ({"activation": "tanhh"}, "activation"),
        ({"norm": "group"}, "norm"), ({"aggr": "pool"}, "aggr"), ({"hidden_channels": 0}, "hidden_channels"),
        ({"out_channels": 0}, "out_channels"), ({"in_channels": 0}, "in_channels"),
    ]:
        with pytest.raises(ValueError, match=argument):
            GraphSAINT(**{"in_channels": IN, "hidden_channels": HIDDEN, "out_channels": OUT, **kwargs})
    for kwargs, argument in [({"jk": "yes"}, "jk"), ({"normalize": 1}, "normalize")]:
        with pytest.raises(TypeError, match=argument):
            GraphSAINT(IN, HIDDEN, OUT, **kwargs)
    with pytest.raises(ValueError, match=r"x must have shape \(N, in_channels=7\)"):
        GraphSAINT(IN, HIDDEN, OUT)(torch.randn(graph.num_nodes, IN - 1), graph)


IN, HIDDEN, OUT = 7, 8, 3


def test_training_forward_drops_out_before_the_classifier():
    """The documented output layer: L2-normalise, dropout, linear classifier. In training mode the model equals
    the hand-stacked layers drawing the same dropout masks (mutant L08 left out the dropout before the
    classifier)."""
    graph = make_graph_case("duplicates")
    x = torch.randn(graph.num_nodes, IN, generator=torch.Generator().manual_seed(1))
    model = GraphSAINT(IN, HIDDEN, OUT, num_layers=2, dropout=0.5).train()
    torch.manual_seed(0)
    out = model(x, graph)
    torch.manual_seed(0)
    h = x
    for conv in model.convs:
        h = F.relu(conv(F.dropout(h, p=0.5, training=True), graph))
    expected = model.classifier(F.dropout(F.normalize(h, dim=-1), p=0.5, training=True))
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


@pytest.mark.parametrize("aggr", ["mean", "sum"])
@pytest.mark.parametrize(("in_channels", "out_channels", "x_dtype"),
                         [(IN, 3, torch.float32), (3, IN, torch.bfloat16)])
def test_conv_under_autocast_sums_in_float32(aggr, in_channels, out_channels, x_dtype):
    """Under bfloat16 autocast the layer summed bfloat16 features with its (normalisation) weights cast to
    bfloat16; as GCNConv, and PyG's GraphConv of GraphSAINT's example (w * x_j), it now sums in float32. Both
    orders: aggregating the narrowed features (a bfloat16 linear output), or the bfloat16 input of a deeper
    layer."""
    torch.manual_seed(0)
    graph = _graph("weighted_duplicates", "cpu")
    graph = graphfuse.Graph(graph.edge_index, num_nodes=graph.num_nodes, edge_weight=graph.edge_weight.float())
    conv = GraphSAINTConv(in_channels, out_channels, aggr=aggr)
    x = torch.randn(graph.num_nodes, in_channels).to(x_dtype)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = conv(x, graph)
        narrowed = F.linear(x, conv.lin_neigh.weight) if out_channels < in_channels else x
    # the float32 sum of the bfloat16 operand, with the float32 weights, then the rest as the layer does it
    src, dst = graph.edge_index
    summed = torch.zeros(graph.num_nodes, narrowed.size(1)).index_add_(
        0, dst, narrowed.float()[src] * graph.edge_weight.unsqueeze(1))
    if aggr == "mean":
        summed = summed / torch.bincount(dst, minlength=graph.num_nodes).clamp(min=1).unsqueeze(1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        neigh = summed + conv.lin_neigh.bias if out_channels < in_channels else conv.lin_neigh(summed)
        want = torch.cat([conv.lin_self(x), neigh], dim=-1)
    assert out.dtype == want.dtype
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
