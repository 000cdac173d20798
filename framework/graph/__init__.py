"""Graph storage, format conversion and normalisation (the graph-processing stage).

``gcn_norm``, ``add_remaining_self_loops`` and ``mean_norm`` exported here dispatch by device (the fused GPU
stage on CUDA, the reference of :mod:`graphfuse.graph.norm` elsewhere); see :mod:`graphfuse.graph.processing`.
"""

from graphfuse.graph.convert import coo_to_csc, coo_to_csr, ptr_to_index
from graphfuse.graph.graph import CSC, CSR, Graph
from graphfuse.graph.norm import to_dense
from graphfuse.graph.processing import (
    Stage,
    add_remaining_self_loops,
    build_formats,
    gcn_norm,
    mean_norm,
    process_gat,
    process_gcn,
    process_graph,
    process_mean,
    register_stage,
)
from graphfuse.graph.reorder import cluster_labels, cluster_order, permute_nodes

__all__ = [
    "CSC", "CSR", "Graph", "Stage", "add_remaining_self_loops", "build_formats", "cluster_labels", "cluster_order",
    "coo_to_csc", "coo_to_csr", "gcn_norm", "mean_norm", "permute_nodes", "process_gat", "process_gcn",
    "process_graph", "process_mean", "ptr_to_index", "register_stage", "to_dense",
]
