"""The aggregation engine: public ops, the backend dispatcher, the reference backend, and the CUDA kernel
backends (registered on import; they need CuPy only when they run)."""

from graphfuse.engine import (
    autograd,  # noqa: F401 - registers the gespmm / gar / gas CUDA backends
    graph_stage,  # noqa: F401 - registers the fused CUDA graph-processing stage
    reference,  # noqa: F401 - registers the "reference" backend
)
from graphfuse.engine.attention import gat_aggregate, gat_attention, gat_scores
from graphfuse.engine.dispatcher import (
    Backend,
    check_backend,
    get_default_backend,
    register_backend,
    registered_backends,
    resolve,
    set_default_backend,
    unregister_backend,
    use_backend,
)
from graphfuse.engine.edge_sampling import EdgeSampling, use_sampling
from graphfuse.engine.functional import REDUCES, aggregate, edge_softmax, sddmm

__all__ = [
    "REDUCES", "Backend", "EdgeSampling", "aggregate", "check_backend", "edge_softmax", "gat_aggregate", "gat_attention", "gat_scores",
    "get_default_backend", "register_backend", "registered_backends", "resolve", "sddmm", "set_default_backend",
    "unregister_backend", "use_backend", "use_sampling",
]
