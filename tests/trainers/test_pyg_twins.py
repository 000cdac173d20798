"""The PyG twins of the trainer's models (model=pyg_gcn / pyg_gat): the same inputs as graphfuse's layers."""

from __future__ import annotations

import torch
import torch_geometric.nn as pyg_nn

from cases import make_graph_case
from graphfuse import Graph
from graphfuse.trainers.build import pyg_conv


def test_pyg_gcn_reads_the_edge_weights_that_graphfuse_gcn_reads():
    """PygConv passed only edge_index: on a weighted graph pyg_gcn trained on A + I while gcn used the weights,
    so the side-by-side comparison was not like for like (review)."""
    g = make_graph_case("isolated")
    g = Graph(g.edge_index, num_nodes=g.num_nodes, edge_weight=torch.rand(g.num_edges) + 0.5)
    x = torch.randn(g.num_nodes, 5)
    twin = pyg_conv("GCNConv").__func__(5, 3)
    torch.testing.assert_close(twin(x, g), twin.conv(x, g.edge_index, g.edge_weight))
    assert not torch.allclose(twin(x, g), twin.conv(x, g.edge_index))
    gat = pyg_conv("GATConv").__func__(5, 3)  # GATConv ignores edge weights in both libraries
    torch.testing.assert_close(gat(x, g), gat.conv(x, g.edge_index))
    assert isinstance(twin.conv, pyg_nn.GCNConv)
