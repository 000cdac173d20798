"""Node-classification datasets: ``load_dataset(name, root=None, **options) -> NodeDataset``.

Registered names: "cora" (Planetoid public split), "facebook" (MUSAE Page-Page, fixed stratified split),
"synthetic" (RMAT graph with planted, homophilous classes) and "ogbn-<name>" (OGB node property prediction).

Example:
    >>> from graphfuse.data import load_dataset
    >>> ds = load_dataset("synthetic", num_nodes=1000, seed=1)
    >>> ds.x.shape
    torch.Size([1000, 64])
"""

from graphfuse.data import facebook, ogbn, planetoid, synthetic  # noqa: F401  (registers the loaders)
from graphfuse.data.dataset import NodeDataset
from graphfuse.data.paths import DatasetNotFoundError, default_root
from graphfuse.data.registry import DATASETS, dataset_options, load_dataset, register_dataset
from graphfuse.data.transforms import normalize_features

__all__ = [
    "DATASETS", "DatasetNotFoundError", "NodeDataset", "dataset_options", "default_root", "load_dataset",
    "normalize_features", "register_dataset",
]
