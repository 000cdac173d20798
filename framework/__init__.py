"""graphfuse: GNN training on NVIDIA GPUs with fused, deterministic aggregation kernels.

The public library surface::

    import graphfuse
    g = graphfuse.Graph(edge_index, num_nodes=n)
    out = graphfuse.aggregate(g, x, reduce="mean")
"""

from graphfuse.engine import (
    EdgeSampling,
    aggregate,
    edge_softmax,
    registered_backends,
    sddmm,
    set_default_backend,
    use_backend,
    use_sampling,
)
from graphfuse.graph import Graph, gcn_norm, mean_norm

__version__ = "0.1.0"

__all__ = [
    "EdgeSampling", "Graph", "aggregate", "edge_softmax", "gcn_norm", "mean_norm", "registered_backends", "sddmm",
    "set_default_backend", "use_backend", "use_sampling",
]
