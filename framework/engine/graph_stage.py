"""The fused CUDA graph-processing stage, registered with :func:`graphfuse.graph.register_stage`.

Runs kernels/graph_processing.cu on a CUDA :class:`~graphfuse.graph.Graph` and returns the processed graph
with everything the aggregation kernels read already cached on it: CSR, CSC, the CSR→CSC permutation, the
int32 index copies and the edge values in CSR and CSC order (so the engine's first aggregation permutes
nothing).
"""

from __future__ import annotations

from torch import Tensor

from graphfuse.graph import CSC, CSR, Graph, Stage, register_stage
from graphfuse.kernels import graph_processing, runtime


def _seed_permuted(graph: Graph, fmt: str, value: Tensor) -> None:
    """Pre-fill the engine's cache of ``graph.edge_weight`` permuted to ``fmt`` order (see
    ``autograd._permuted``; not for an inference tensor, which has no version counter)."""
    if not graph.edge_weight.is_inference():
        graph.cached(("kernels", "permuted", fmt), lambda: value, weighted=True)


def run(graph: Graph, self_loops: bool, fill_value: float, norm: str) -> Graph:
    """The fused stage (semantics of :func:`graphfuse.graph.process_graph`) on a CUDA graph."""
    weight = graph.edge_weight
    p = graph_processing.process(graph.edge_index, graph.num_src, graph.num_dst,
                                 None if weight is None else weight.contiguous(),  # e.g. a column of edge_attr
                                 self_loops=self_loops, fill_value=fill_value, norm=norm)
    if not self_loops and norm == "none":
        out = graph  # formats of the graph itself; its weights stay the COO-order values
    else:
        out = Graph(p.edge_index, edge_weight=p.values, num_src=graph.num_src, num_dst=graph.num_dst,
                    validate=False)
    out.cached("csr", lambda: CSR(p.rowptr, p.col, p.csr_perm, p.row))
    out.cached("csc", lambda: CSC(p.colptr, p.csc_row, p.csc_perm, p.csc_col))
    out.cached("csr_to_csc", lambda: p.csr_to_csc)
    out.cached(("kernels", "index32", "csr"), lambda: p.col32)
    out.cached(("kernels", "index32", "csc"), lambda: p.row32)
    if out.edge_weight is not None and p.csr_values is not None:
        _seed_permuted(out, "csr", p.csr_values)
        _seed_permuted(out, "csc", p.csc_values)
    return out


register_stage("cuda", Stage(run=run, is_available=runtime.is_available))
