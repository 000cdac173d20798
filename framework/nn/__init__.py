"""Graph neural network layers and models built on the aggregation engine (``graphfuse.aggregate`` & co.)."""

from graphfuse.nn.gat_conv import GATConv
from graphfuse.nn.gcn_conv import GCNConv
from graphfuse.nn.models import ACTIVATIONS, GAT, GCN, GNN, MODELS, NORMS, GraphSAGE, GraphSAINT
from graphfuse.nn.sage_conv import SAGEConv
from graphfuse.nn.saint_conv import GraphSAINTConv

__all__ = [
    "ACTIVATIONS", "GAT", "GCN", "GNN", "MODELS", "NORMS", "GATConv", "GCNConv", "GraphSAGE", "GraphSAINT",
    "GraphSAINTConv", "SAGEConv",
]
