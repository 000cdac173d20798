"""Input checks shared by the layers: node features, the graph argument (a Graph or an edge_index), widths,
rates and backend names; and the unweighted view of a graph for layers whose messages ignore edge weights.

Shapes:
    x: (N, F); edge_index: (2, E) int64 with node ids in [0, N).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from graphfuse.checks import check_finite_real, is_int
from graphfuse.engine import check_backend
from graphfuse.graph import Graph

GraphLike = Graph | Tensor


def check_features(owner: str, x: Any, in_channels: int, dtype: torch.dtype, name: str = "x") -> None:
    """Raise unless ``x`` (called ``name`` in the message) is a floating-point (N, in_channels) tensor of the
    weights' ``dtype`` (under autocast, which casts float32 and half precision for the matrix products, any of
    those; float64 it leaves alone, so there it must match)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{owner}: {name} must be a torch.Tensor; got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{owner}: {name} must be floating point; got {x.dtype}")
    if x.dtype != dtype and (not torch.is_autocast_enabled(x.device.type) or torch.float64 in (x.dtype, dtype)):
        raise TypeError(f"{owner}: {name} is {x.dtype} but the weights are {dtype}; convert one to the other "
                        f"({name}.to({dtype}) or module.to({x.dtype}))")
    if x.dim() != 2 or x.size(1) != in_channels:
        raise ValueError(f"{owner}: {name} must have shape (N, in_channels={in_channels}); got {tuple(x.shape)}")


def as_graph(owner: str, x: Tensor, graph: Any, *, square: bool = False, num_dst: int | None = None) -> Graph:
    """The :class:`Graph` a layer runs on, checked against the node features ``x``.

    Args:
        owner: the layer or model name that leads every error message.
        x: (N, F) node features; ``N`` must equal the graph's number of source nodes.
        graph: a :class:`Graph` (returned as is, so its caches persist across calls) or an edge_index tensor,
            wrapped in ``Graph(edge_index, num_nodes=N)``.
        square: refuse bipartite blocks (layers that add self-loops or use symmetric degrees).
        num_dst: the number of targets, when the caller holds their features apart from ``x`` (a bipartite
            ``(x_src, x_dst)`` pair): an edge_index then spans ``N`` sources and ``num_dst`` targets, and a
            Graph must have that many.

    Raises:
        TypeError: ``graph`` is neither a Graph nor a tensor.
        ValueError: ``x`` has the wrong number of rows, ``edge_index`` is malformed or indexes past ``N``,
            or a bipartite block where ``square`` is required.
    """
    if isinstance(graph, Tensor):
        if graph.layout != torch.strided:  # PyG's adj_t: its float values made a dtype error of Graph's
            raise TypeError(f"{owner}: a sparse adjacency ({graph.layout}) is not supported; pass an edge_index "
                            "tensor of shape (2, E) or a graphfuse.Graph (Graph.from_pyg, or edge_index and weights)")
        sizes = {"num_nodes": x.size(0)} if num_dst is None else {"num_src": x.size(0), "num_dst": num_dst}
        try:
            graph = Graph(graph, **sizes)
        except ValueError as err:
            message = f"{owner}: edge_index does not fit x of shape {tuple(x.shape)}: {err}"
            raise ValueError(message) from err
        except TypeError as err:
            raise TypeError(f"{owner}: {err}") from err
    elif not isinstance(graph, Graph):
        raise TypeError(
            f"{owner}: graph must be a graphfuse.Graph or an edge_index tensor of shape (2, E); "
            f"got {type(graph).__name__}"
        )
    if x.size(0) != graph.num_src:
        raise ValueError(f"{owner}: {'x' if num_dst is None else 'x_src'} must have one row per source node "
                         f"(num_src={graph.num_src}); got {tuple(x.shape)}")
    if num_dst is not None and graph.num_dst != num_dst:
        raise ValueError(f"{owner}: x_dst must have one row per target node (num_dst={graph.num_dst}); got "
                         f"{num_dst} rows")
    if square and graph.is_bipartite:
        raise ValueError(f"{owner}: graph must be square (num_src == num_dst); got {graph}")
    if x.device != graph.device:
        raise ValueError(f"{owner}: x is on {x.device} but the graph is on {graph.device}")
    return graph


def with_edge_weight(owner: str, graph: Graph, edge_weight: Any) -> Graph:
    """``graph``'s edges with ``edge_weight`` in place of its own weights: a layer's per-call ``edge_weight``
    argument, as PyG's. A new Graph, so what it caches (formats, normalisation) is built per call, as for an
    edge_index input; a Graph that holds its weights keeps them cached across calls.

    Raises:
        TypeError, ValueError: ``edge_weight`` is not a floating-point (E,) tensor on the graph's device.
    """
    try:
        return graph.reweighted(edge_weight)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{owner}: {err}") from None


def check_positive_ints(owner: str, **values: int) -> None:
    """Raise ValueError naming the first of ``values`` (channel widths, head counts) that is not an int >= 1
    (any integral type, e.g. a NumPy integer; a bool is not a width)."""
    for arg, value in values.items():
        if not is_int(value) or value < 1:
            raise ValueError(f"{owner}: {arg} must be an int >= 1; got {value!r}")


def check_rate(owner: str, arg: str, value: float) -> None:
    """Raise naming ``arg`` unless ``value`` is a real number in [0, 1) (a dropout rate; NumPy numbers
    too, as the width checks take NumPy integers)."""
    check_finite_real(owner, arg, value)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{owner}: {arg} must be a number in [0, 1); got {value!r}")


def check_layer_backend(owner: str, backend: Any, extra: tuple[str, ...] = ()) -> None:
    """Raise unless ``backend`` is None (the engine's default) or a name :func:`graphfuse.engine.check_backend`
    takes: checked when the layer is built, so a typo fails there, not at the first forward pass."""
    if backend is not None:
        check_backend(owner, backend, extra=extra)


def unweighted(graph: Graph) -> Graph:
    """``graph`` without edge weights (cached on it): for layers whose messages ignore them (SAGE, GAT)."""
    if graph.edge_weight is None:
        return graph
    return graph.cached("unweighted", lambda: graph.reweighted(None))


def weighted_sum_dtype(h: Tensor, graph: Graph) -> Tensor:
    """``h`` in the dtype its weighted sum over ``graph`` runs in: under autocast ``h`` comes float16/bfloat16 from
    a linear layer while the edge weights stay float32, and PyG's ``w * x_j`` promotes, so the sum runs in float32
    (cast to ``h``'s dtype, the weights had lost their precision and the sum its accumulator; the engine casts the
    weights to float32). Without autocast a half-precision model keeps its dtype."""
    if graph.edge_weight is not None and h.dtype in (torch.float16, torch.bfloat16) \
            and torch.is_autocast_enabled(h.device.type):
        return h.float()  # float32, not the weights' dtype: float64 weights (from NumPy) made the next layer fail
    return h
