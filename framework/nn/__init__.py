"""Graph neural network layers and models built on the aggregation engine (``graphfuse.aggregate`` & co.)."""

from graphfuse.nn.gat_conv import GATConv
from graphfuse.nn.gcn_conv import GCNConv
from graphfuse.nn.models import ACTIVATIONS, GAT, GCN, GNN, MODELS, NORMS, GraphSAGE
from graphfuse.nn.sage_conv import SAGEConv

__all__ = [
    "ACTIVATIONS", "GAT", "GCN", "GNN", "MODELS", "NORMS", "GATConv", "GCNConv", "GraphSAGE", "SAGEConv",
]
