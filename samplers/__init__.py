"""GPU-resident samplers: GraphSAINT node / edge / random-walk subgraphs with their normalisation, and
PyG-NeighborLoader-style neighbour sampling, in PyTorch (the neighbour draws on CUDA: one CuPy kernel) on the
device the graph lives on.

Samplers are pure: ``(graph, seeds or budget, torch.Generator) → a small frozen dataclass``. Loaders own a
generator, gather features on the device and yield :class:`Batch` objects holding a :class:`graphfuse.Graph`.

Example:
    >>> from graphfuse.samplers import SaintLoader, SaintRandomWalkSampler
    >>> loader = SaintLoader(graph, SaintRandomWalkSampler(roots=3000, walk_length=2), x=x, y=y,
    ...                      num_steps=10, sample_coverage=50, seed=0)
    >>> batch = next(iter(loader))   # batch.graph, batch.x, batch.node_norm, batch.edge_norm, ...
"""

from graphfuse.samplers.batch import Batch
from graphfuse.samplers.fingerprint import graph_fingerprint, tensor_fingerprint
from graphfuse.samplers.loader import NeighborLoader, SaintLoader, make_generator
from graphfuse.samplers.neighbor import NeighborSample, NeighborSampler, SampledEdges, sample_neighbors
from graphfuse.samplers.saint import (
    SAINT_SAMPLERS,
    SaintEdgeSampler,
    SaintNodeSampler,
    SaintRandomWalkSampler,
    edge_sampling_cdf,
    random_walk,
)
from graphfuse.samplers.saint_norm import (
    NORMS,
    SaintNorm,
    TrainingSubgraph,
    compute_saint_norm,
    count_saint_samples,
    presampling_seed,
    saint_norm_from_counts,
    training_subgraph,
)
from graphfuse.samplers.subgraph import Subgraph, induced_edges, induced_subgraph

__all__ = [
    "NORMS",
    "SAINT_SAMPLERS",
    "Batch",
    "NeighborLoader",
    "NeighborSample",
    "NeighborSampler",
    "SaintEdgeSampler",
    "SaintLoader",
    "SaintNodeSampler",
    "SaintNorm",
    "SaintRandomWalkSampler",
    "SampledEdges",
    "Subgraph",
    "TrainingSubgraph",
    "compute_saint_norm",
    "count_saint_samples",
    "edge_sampling_cdf",
    "graph_fingerprint",
    "induced_edges",
    "induced_subgraph",
    "make_generator",
    "presampling_seed",
    "random_walk",
    "saint_norm_from_counts",
    "sample_neighbors",
    "tensor_fingerprint",
    "training_subgraph",
]
