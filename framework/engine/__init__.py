"""The aggregation engine: public ops, the backend dispatcher, and the reference backend."""

from graphfuse.engine import reference
from graphfuse.engine.dispatcher import (
    Backend,
    get_default_backend,
    register_backend,
    registered_backends,
    resolve,
    set_default_backend,
    use_backend,
)
from graphfuse.engine.functional import REDUCES, aggregate, edge_softmax, sddmm

register_backend(
    Backend(
        name="reference",
        ops={"aggregate": reference.aggregate, "sddmm": reference.sddmm, "edge_softmax": reference.edge_softmax},
        devices=frozenset({"cpu", "cuda"}),
        deterministic_on=frozenset({"cpu"}),
        priority=-100,
    )
)

__all__ = [
    "REDUCES", "Backend", "aggregate", "edge_softmax", "get_default_backend", "register_backend",
    "registered_backends", "resolve", "sddmm", "set_default_backend", "use_backend",
]
