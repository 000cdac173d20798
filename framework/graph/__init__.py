"""Graph storage, format conversion and normalisation (the graph-processing stage's reference path)."""

from graphfuse.graph.convert import coo_to_csc, coo_to_csr, ptr_to_index
from graphfuse.graph.graph import CSC, CSR, Graph
from graphfuse.graph.norm import add_remaining_self_loops, gcn_norm, mean_norm, to_dense

__all__ = [
    "CSC", "CSR", "Graph", "add_remaining_self_loops", "coo_to_csc", "coo_to_csr", "gcn_norm", "mean_norm",
    "ptr_to_index", "to_dense",
]
