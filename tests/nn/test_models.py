"""graphfuse.nn models: shapes, stacking against PyG convs, training on a planted problem, bad inputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torch_geometric.nn as pyg_nn

import graphfuse
from cases import TOLERANCES, make_graph_case, planted_communities, train_steps
from graphfuse.nn import GAT, GCN, MODELS, GATConv, GCNConv, GraphSAGE, GraphSAINT, SAGEConv

TOL = TOLERANCES[torch.float32]
IN, HIDDEN, OUT = 7, 8, 3


def _model(name: str, **kwargs):
    if name == "gat":
        kwargs = {"heads": 2, "out_heads": 3, **kwargs}
    return MODELS[name](IN, HIDDEN, OUT, **kwargs)


def test_registry():
    assert MODELS == {"gcn": GCN, "gat": GAT, "sage": GraphSAGE, "saint": GraphSAINT}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("num_layers", [1, 3])
@pytest.mark.parametrize("norm", [None, "batch", "layer"])
def test_output_shape_and_layers(name, num_layers, norm):
    graph = make_graph_case("isolated")
    model = _model(name, num_layers=num_layers, norm=norm, activation="elu")
    out = model(torch.randn(graph.num_nodes, IN), graph)
    assert out.shape == (graph.num_nodes, OUT)
    assert torch.isfinite(out).all()
    assert len(model.convs) == num_layers
    assert (model.norms is None) == (norm is None)
    if norm is not None:
        assert len(model.norms) == num_layers - (name != "saint")  # GraphSAINT ends in a classifier


def test_gat_head_layout():
    model = GAT(IN, HIDDEN, OUT, num_layers=3, heads=4, out_heads=2, attn_dropout=0.3)
    hidden = [(c.in_channels, c.heads, c.concat, c.dropout) for c in model.convs]
    assert hidden == [(IN, 4, True, 0.3), (HIDDEN * 4, 4, True, 0.3), (HIDDEN * 4, 2, False, 0.3)]
    assert model.convs[-1].out_channels == OUT


def _pyg_stack(model):
    """The same network from PyG convs with the model's weights: conv → relu → ... → conv."""
    convs = []
    for conv in model.convs:
        if isinstance(conv, GCNConv):
            theirs = pyg_nn.GCNConv(conv.in_channels, conv.out_channels)
        elif isinstance(conv, GATConv):
            theirs = pyg_nn.GATConv(conv.in_channels, conv.out_channels, conv.heads, concat=conv.concat)
        else:
            assert isinstance(conv, SAGEConv)
            aggr = "mean" if conv.aggr == "mean" else "max"
            project = conv.aggr == "pool"
            theirs = pyg_nn.SAGEConv(conv.in_channels, conv.out_channels, aggr=aggr, project=project)
        theirs.load_state_dict(conv.state_dict())
        convs.append(theirs.eval())

    def forward(x, edge_index):
        for i, conv in enumerate(convs):
            x = conv(x, edge_index)
            if i < len(convs) - 1:
                x = F.relu(x)
        return x

    return forward


@pytest.mark.parametrize(
    ("name", "kwargs"), [("gcn", {}), ("gat", {}), ("sage", {}), ("sage", {"aggr": "pool"})]
)
@pytest.mark.parametrize("graph_input", ["graph", "edge_index"])
def test_model_matches_stacked_pyg_convs(name, kwargs, graph_input):
    torch.manual_seed(0)
    graph = make_graph_case("duplicates")
    model = _model(name, num_layers=3, **kwargs).eval()
    x = torch.randn(graph.num_nodes, IN)
    out = model(x, graph if graph_input == "graph" else graph.edge_index)
    torch.testing.assert_close(out, _pyg_stack(model)(x, graph.edge_index), **TOL)


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("gcn", {}), ("gat", {}), ("sage", {}), ("sage", {"aggr": "max"}),
        ("gcn", {"norm": "batch", "activation": "gelu"}),
        ("gat", {"norm": "layer", "activation": "leaky_relu"}),
    ],
)
def test_trains_on_planted_problem(name, kwargs):
    torch.manual_seed(0)
    x, y, graph = planted_communities(IN)
    extra = {"heads": 2, "attn_dropout": 0.2} if name == "gat" else {}
    model = MODELS[name](IN, HIDDEN, 2, dropout=0.2, **extra, **kwargs)
    before, after, losses = train_steps(model, x, y, graph)
    assert after < 0.3 * before, (before, after)
    assert sum(losses[-5:]) < sum(losses[:5])
    model.eval()
    assert (model(x, graph).argmax(1) == y).float().mean() > 0.9


def test_dropout_only_in_training():
    graph = make_graph_case("unsorted")
    x = torch.randn(graph.num_nodes, IN)
    model = GCN(IN, HIDDEN, OUT, dropout=0.5)
    torch.testing.assert_close(model.eval()(x, graph), model(x, graph))
    assert not torch.allclose(model.train()(x, graph), model.eval()(x, graph))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_backend_is_passed_to_every_conv(name):
    graph = make_graph_case("isolated")
    x = torch.randn(graph.num_nodes, IN)
    model = _model(name, num_layers=3, backend="reference")
    assert [conv.backend for conv in model.convs] == ["reference"] * 3
    model(x, graph)
    with pytest.raises(ValueError, match="no-such-backend"):
        _model(name, backend="no-such-backend")(x, graph)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_bad_inputs_raise_naming_the_argument(name):
    graph = make_graph_case("isolated")
    model = _model(name)
    with pytest.raises(ValueError, match=r"x must have one row per source node"):
        model(torch.randn(graph.num_nodes + 2, IN), graph)
    with pytest.raises(ValueError, match=r"x must have shape \(N, in_channels=7\)"):
        model(torch.randn(graph.num_nodes, IN - 1), graph)
    with pytest.raises(ValueError, match="activation"):
        _model(name, activation="tanhh")
    with pytest.raises(ValueError, match="norm"):
        _model(name, norm="group")
    with pytest.raises(ValueError, match="num_layers"):
        _model(name, num_layers=0)
    with pytest.raises(ValueError, match="dropout"):
        _model(name, dropout=1.5)
    with pytest.raises(TypeError, match="dropout must be a real number; got '0.5'"):
        _model(name, dropout="0.5")
    with pytest.raises(ValueError, match="activation"):
        _model(name, activation=["relu"])
    cls, extra = MODELS[name], {"heads": 2, "out_heads": 3} if name == "gat" else {}
    for width in ("hidden_channels", "out_channels", "in_channels"):  # 0 trained a constant model, -1 crashed
        for bad in (0, -1, 4.0):
            args = {"in_channels": IN, "hidden_channels": HIDDEN, "out_channels": OUT, width: bad}
            with pytest.raises(ValueError, match=f"{cls.__name__}: {width} must be an int >= 1; got {bad!r}"):
                cls(**args, **extra)


def test_the_layer_stack_checks_its_convs_and_width():
    """An empty stack failed at the first forward pass with an IndexError (review)."""
    from graphfuse.nn.models import GNN

    with pytest.raises(ValueError, match=r"GNN: convs must hold at least one convolution; got \[\]"):
        GNN([], 4)
    with pytest.raises(ValueError, match="GNN: hidden_width must be an int >= 1; got 0"):
        GNN([GCNConv(IN, OUT)], 0)


def test_a_sparse_adjacency_gets_a_clear_error():
    """PyG's adj_t (sparse, float values) got Graph's 'edge_index must have an integer dtype', without the layer's
    name (review)."""
    graph = make_graph_case("isolated")
    x = torch.randn(graph.num_nodes, IN)
    adj = torch.sparse_coo_tensor(graph.edge_index, torch.ones(graph.num_edges), (graph.num_nodes,) * 2)
    for sparse in (adj, adj.to_sparse_csr()):
        with pytest.raises(TypeError, match="GCNConv: a sparse adjacency .* is not supported"):
            GCNConv(IN, OUT)(x, sparse)
    with pytest.raises(TypeError, match="GCNConv: Graph: edge_index must have an integer dtype"):
        GCNConv(IN, OUT)(x, graph.edge_index.float())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_numpy_dropout_rates_are_accepted(name):
    """A NumPy float rate (e.g. from a sweep over np.linspace) was refused by the rate check, which took only
    Python int/float while the width checks take NumPy integers; it is stored as a float."""
    np = pytest.importorskip("numpy")
    extra = {"attn_dropout": np.float32(0.25)} if name == "gat" else {}
    model = _model(name, dropout=np.float32(0.5), **extra)
    assert model.dropout == 0.5 and type(model.dropout) is float
    if name == "gat":
        assert all(type(conv.dropout) is float and conv.dropout == 0.25 for conv in model.convs)
    with pytest.raises(ValueError, match="dropout must be a number in"):
        _model(name, dropout=np.float64(1.0))


def test_gat_names_its_own_arguments():
    with pytest.raises(ValueError, match="GAT: out_heads must be an int >= 1; got 0"):
        _model("gat", out_heads=0)
    with pytest.raises(ValueError, match="GAT: attn_dropout must be a number in"):
        _model("gat", attn_dropout=1.0)


def test_gat_runs_under_bf16_autocast():
    """Under autocast the linear layer gives bfloat16 features while the attention vectors stay float32:
    gat_scores refused the mix, so trainer.precision=bf16-mixed / 16-mixed crashed GAT in its first step."""
    from graphfuse import Graph

    graph = Graph(torch.randint(0, 50, (2, 300), generator=torch.Generator().manual_seed(0)), num_nodes=50)
    torch.manual_seed(0)
    model, x = GAT(8, 4, 3, heads=2).eval(), torch.randn(50, 8)
    full = model(x, graph)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = model(x, graph)
    mixed.float().sum().backward()
    torch.testing.assert_close(mixed.float(), full, rtol=0.05, atol=0.05)
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_keep_the_dtype_of_their_parameters(name):
    """A bfloat16 model (no autocast) gives bfloat16 features from layer to layer, and a float32 model float32 ones
    under a float64 default dtype, as PyG's do: GCNConv had summed with its float32 (default-dtype) normalisation
    weights in float32, and the next layer refused the features."""
    graph = make_graph_case("duplicates")
    x = torch.randn(graph.num_nodes, IN)
    torch.manual_seed(0)
    model = _model(name).eval()
    full = model(x, graph)
    half = model.bfloat16()(x.bfloat16(), graph)
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), full, rtol=0.1, atol=0.1)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert model.float()(x, make_graph_case("duplicates")).dtype == torch.float32
    finally:
        torch.set_default_dtype(previous)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_trace_with_torch_jit_for_their_node_count(name):
    """torch.jit.trace, as PyG's layers allow: x.size(0) is a 0-d tensor there, which Graph refused as num_nodes.
    The trace keeps the node count (a graph of another size is refused by the trace), and takes other edges."""
    graph = make_graph_case("duplicates")
    gen = torch.Generator().manual_seed(5)
    other = graphfuse.Graph(torch.randint(0, graph.num_nodes, (2, 2 * graph.num_edges), generator=gen),
                            num_nodes=graph.num_nodes)
    x, y = (torch.randn(graph.num_nodes, IN, generator=gen) for _ in range(2))
    model = _model(name).eval()
    with pytest.warns(torch.jit.TracerWarning):
        traced = torch.jit.trace(model, (x, graph.edge_index))
    torch.testing.assert_close(traced(y, other.edge_index), model(y, other.edge_index), **TOL)
    assert graphfuse.Graph(graph.edge_index, num_nodes=torch.tensor(graph.num_nodes)).num_nodes == graph.num_nodes


@pytest.mark.parametrize("name", sorted(MODELS))
def test_features_of_another_dtype_are_named(name):
    """float64 features (torch.from_numpy) failed inside torch's matmul: 'expected m1 and m2 to have the same dtype'."""
    model = _model(name)
    graph = make_graph_case("duplicates")
    x = torch.randn(graph.num_nodes, IN, dtype=torch.float64)
    model_name = type(model).__name__
    with pytest.raises(TypeError, match=f"{model_name}: x is torch.float64 but the weights are torch.float32"):
        model(x, graph)
    conv = model.convs[0]
    with pytest.raises(TypeError, match=f"{type(conv).__name__}: x is torch.float64 but the weights are"):
        conv(x, graph)
    assert model.double()(x, graph).dtype == torch.float64
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast casts float32 and half precision for the products
        model.float()(x.float(), graph)
        model(x.float().bfloat16(), graph)
        with pytest.raises(TypeError, match=f"{model_name}: x is torch.float64 but the weights are torch.float32"):
            model(x, graph)  # float64 autocast leaves alone: it failed inside torch's matmul
        with pytest.raises(TypeError, match=f"{model_name}: x is torch.float32 but the weights are torch.float64"):
            model.double()(x.float(), graph)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_float64_edge_weights_under_autocast(name):
    """A float32 model on a graph with float64 weights (from NumPy) runs without autocast (the weights are cast to the
    features' dtype); under it GCN and GraphSAINT promoted their half-precision sums to float64, which the next
    layer's matrix product refused."""
    model = _model(name)
    graph = make_graph_case("duplicates")
    graph = graphfuse.Graph(graph.edge_index, num_nodes=graph.num_nodes,
                            edge_weight=torch.rand(graph.num_edges, dtype=torch.float64) + 0.5)
    x = torch.randn(graph.num_nodes, IN)
    assert model(x, graph).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model(x, graph).dtype in (torch.float32, torch.bfloat16)


def test_gat_names_concat_as_set_per_layer():
    """concat= in the conv keyword arguments reached the last layer twice: "GATConv() got multiple values for
    keyword argument 'concat'"."""
    with pytest.raises(ValueError, match="GAT: concat is set per layer"):
        GAT(IN, 4, OUT, concat=True)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_a_multi_layer_model_names_the_square_requirement(name):
    """The message named an inner conv and a hidden tensor the user never passed."""
    block = make_graph_case("bipartite")
    x = torch.randn(block.num_src, IN)
    model = _model(name)
    with pytest.raises(ValueError, match=f"{type(model).__name__}: graph must be square"):
        model(x, block)
    if name in ("sage", "saint"):  # one layer maps sources to targets (GCN's and GAT's self-loops need a square graph)
        assert _model(name, num_layers=1)(x, block).shape == (block.num_dst, OUT)
