"""The mini-batch a sampling loader yields: a sampled :class:`~graphfuse.graph.Graph` with gathered node data.

Shapes:
    graph: a square Graph on n local nodes and e edges; x: (n, F); y: (n,); n_id: (n,); e_id: (e,);
    node tensors (masks): (n,); node_norm: (n,); edge_norm: (e,) in the graph's COO edge order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from graphfuse.graph import Graph


@dataclass(frozen=True)
class Batch:
    """One sampled mini-batch, everything on the sampling device.

    Attributes:
        graph: the sampled subgraph in local ids (COO; ``graph.csr`` gives the hybrid CSR/COO row array).
        n_id: global id of each local node; e_id: global COO id of each local edge.
        x, y: gathered features and labels (None when the loader has none).
        node_data: other gathered per-node tensors, by name (e.g. ``train_mask``).
        batch_size: rows the loss is taken over: the seeds (the first ``batch_size`` nodes) for neighbour
            batches, every node for GraphSAINT batches.
        node_norm, edge_norm: GraphSAINT loss and aggregation coefficients of the batch's nodes and edges.
        num_sampled_nodes, num_sampled_edges: per-hop counts of neighbour batches.
        batch: seed index of each node (disjoint neighbour sampling).
        input_id: positions of the seeds in the loader's input nodes (neighbour batches).

    Shapes:
        See the module docstring.
    """

    graph: Graph
    n_id: Tensor
    e_id: Tensor
    x: Tensor | None = None
    y: Tensor | None = None
    node_data: Mapping[str, Tensor] = field(default_factory=dict)
    batch_size: int = 0
    node_norm: Tensor | None = None
    edge_norm: Tensor | None = None
    num_sampled_nodes: tuple[int, ...] | None = None
    num_sampled_edges: tuple[int, ...] | None = None
    batch: Tensor | None = None
    input_id: Tensor | None = None

    @property
    def num_nodes(self) -> int:
        """n."""
        return self.graph.num_nodes

    @property
    def edge_index(self) -> Tensor:
        """(2, e) local edges, row 0 = source, row 1 = target."""
        return self.graph.edge_index

    def __getattr__(self, name: str) -> Any:
        node_data = self.__dict__.get("node_data", {})
        if name in node_data:
            return node_data[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def to_pyg(self) -> Any:
        """A ``torch_geometric.data.Data`` with the same tensors (shared, not copied).

        Holds ``edge_index``, ``num_nodes``, ``n_id``, ``e_id``, ``batch_size`` and every tensor field that is
        set (``x``, ``y``, the node data by name, ``node_norm``, ``edge_norm``, ``batch``, ``input_id``,
        ``num_sampled_nodes``/``num_sampled_edges`` as lists), as PyG's loaders name them.
        """
        from torch_geometric.data import Data

        data = Data(edge_index=self.graph.edge_index, num_nodes=self.num_nodes, n_id=self.n_id, e_id=self.e_id)
        data.batch_size = self.batch_size
        if self.graph.edge_weight is not None:
            data.edge_weight = self.graph.edge_weight
        for name in ("x", "y", "node_norm", "edge_norm", "batch", "input_id"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        for name, value in self.node_data.items():
            data[name] = value
        for name in ("num_sampled_nodes", "num_sampled_edges"):
            value = getattr(self, name)
            if value is not None:
                data[name] = list(value)
        return data

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        """The same batch on ``device``."""

        def move(value: Any) -> Any:
            return value.to(device, non_blocking=non_blocking) if isinstance(value, Tensor) else value

        return Batch(
            graph=self.graph.to(device, non_blocking=non_blocking),
            n_id=move(self.n_id),
            e_id=move(self.e_id),
            x=move(self.x),
            y=move(self.y),
            node_data={k: move(v) for k, v in self.node_data.items()},
            batch_size=self.batch_size,
            node_norm=move(self.node_norm),
            edge_norm=move(self.edge_norm),
            num_sampled_nodes=self.num_sampled_nodes,
            num_sampled_edges=self.num_sampled_edges,
            batch=move(self.batch),
            input_id=move(self.input_id),
        )
