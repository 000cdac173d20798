"""Turn config sections into objects: each section becomes plain constructor arguments through a registry dict.

Nothing below trainers/ sees omegaconf: :func:`build_dataset` calls ``graphfuse.data.load_dataset`` with plain
values, :func:`build_model` calls a model class with plain keyword arguments and :func:`build_datamodule`
picks the full-graph or the sampled data module from the sampler section.

The ``pyg_gcn`` / ``pyg_gat`` models are the side-by-side reference: PyTorch Geometric's ``GCNConv`` /
``GATConv`` in the very layer stack of graphfuse's models (:class:`graphfuse.nn.GNN`: dropout → conv →
[norm → activation]), so that the two differ only in their convolutions. ``torch_geometric.nn.models.GCN``/
``GAT`` would not do: they skip the input dropout and give the output GAT layer the hidden layers' head count.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from graphfuse.data import DatasetNotFoundError, NodeDataset, dataset_options, default_root, load_dataset
from graphfuse.data.paths import check_outside_mirror
from graphfuse.engine import registered_backends, resolve
from graphfuse.engine.attention import FUSED
from graphfuse.engine.autograd import KERNEL_BACKENDS
from graphfuse.graph import Graph
from graphfuse.kernels import runtime
from graphfuse.nn import GAT, GCN, MODELS
from graphfuse.samplers.saint_norm import check_cache_dir
from graphfuse.trainers.config import SAINT_PARAMS, ConfigError, ModelConfig, SamplerConfig
from graphfuse.trainers.datamodule import FullGraphDataModule
from graphfuse.trainers.sampled import NEIGHBOR_LOADER_ARGS, SAINT_LOADER_ARGS, SampledDataModule


class PygConv(nn.Module):
    """Adapter calling a PyG conv as ``conv(x, graph)`` with ``graph.edge_index``, and ``graph.edge_weight`` for a
    ``weighted`` conv (GCNConv: the weights graphfuse's GCNConv reads; GATConv ignores them, in both libraries).

    Shapes:
        x: (N, F_in); graph: Graph of N nodes; out: (N, F_out).
    """

    def __init__(self, conv: nn.Module, weighted: bool = False) -> None:
        super().__init__()
        self.conv = conv
        self.weighted = weighted
        self.in_channels = conv.in_channels

    def reset_parameters(self) -> None:
        self.conv.reset_parameters()

    def forward(self, x: Tensor, graph: Graph) -> Tensor:
        if self.weighted and graph.edge_weight is not None:
            return self.conv(x, graph.edge_index, graph.edge_weight)
        return self.conv(x, graph.edge_index)


def pyg_conv(name: str) -> Callable[..., nn.Module]:
    """A ``conv_class`` building ``torch_geometric.nn.<name>`` wrapped in :class:`PygConv` (PyG imported on use)."""

    def build(*args: Any, **kwargs: Any) -> nn.Module:
        import torch_geometric.nn

        return PygConv(getattr(torch_geometric.nn, name)(*args, **kwargs), weighted=name == "GCNConv")

    return staticmethod(build)


class PygGCN(GCN):
    """graphfuse's GCN layer stack with ``torch_geometric.nn.GCNConv`` convolutions."""

    conv_class = pyg_conv("GCNConv")


class PygGAT(GAT):
    """graphfuse's GAT layer stack with ``torch_geometric.nn.GATConv`` convolutions."""

    conv_class = pyg_conv("GATConv")


MODEL_BUILDERS: dict[str, Callable[..., nn.Module]] = {**MODELS, "pyg_gcn": PygGCN, "pyg_gat": PygGAT}
"""Model name → callable ``(in_channels, hidden_channels, out_channels, **model_args) -> nn.Module``:
``graphfuse.nn.MODELS`` plus the PyG reference twins."""


log = logging.getLogger(__name__)


def warn_ignored(section: str, cfg: DictConfig, used: set[str], schema: type, what: str) -> None:
    """Warn about keys of a config section that ``what`` does not read but that were set away from their
    defaults (``model.heads=4`` on a GCN): config.yaml records them, and nothing applies them."""
    defaults = OmegaConf.structured(schema)
    ignored = sorted(k for k in cfg if k not in used and cfg[k] != defaults[k])
    if ignored:
        values = OmegaConf.to_container(cfg)
        log.warning("%s does not use %s; %s ignored", what, ", ".join(f"{section}.{k}={values[k]}" for k in ignored),
                    "it is" if len(ignored) == 1 else "they are")


def model_kwargs(cfg: DictConfig) -> dict[str, Any]:
    """The keyword arguments of ``MODEL_BUILDERS[cfg.name]`` taken from the model section.

    A key of the section goes to the model when the model's signature names it (``heads`` to GAT, ``aggr`` to
    GraphSAGE, ...); ``backend`` goes to graphfuse's own models (``graphfuse.nn.MODELS``), not to the PyG twins.
    ``name`` and ``hidden`` (passed positionally as ``hidden_channels``) are not keyword arguments.
    """
    if cfg.name not in MODEL_BUILDERS:
        raise ConfigError(
            f"invalid value for 'model.name': {cfg.name!r}; valid models are: {', '.join(MODEL_BUILDERS)}."
        )
    params = inspect.signature(MODEL_BUILDERS[cfg.name]).parameters
    kwargs = {key: cfg[key] for key in cfg if key in params and key not in ("name", "hidden")}
    if cfg.name in MODELS and "backend" not in params:
        kwargs["backend"] = cfg.backend
    return kwargs


def _model_keys(cfg: DictConfig) -> set[str]:
    """The model-section keys model ``cfg.name`` reads (see :func:`model_kwargs`)."""
    return {"name", "hidden", *model_kwargs(cfg)}


def build_model(cfg: DictConfig, in_channels: int, out_channels: int) -> nn.Module:
    """The model of the ``model`` section for ``in_channels`` input features and ``out_channels`` classes.

    Raises:
        ConfigError: unknown model name, or hyper-parameters the model rejects.
    """
    kwargs = model_kwargs(cfg)
    warn_ignored("model", cfg, _model_keys(cfg), ModelConfig, f"model {cfg.name!r}")
    backends = ("auto", *registered_backends(), *((FUSED,) if cfg.name == "gat" else ()))  # GAT's fused attention
    if cfg.backend not in backends:
        raise ConfigError(f"invalid value for 'model.backend': {cfg.backend!r}; valid backends are: "
                          f"{', '.join(backends)}.")
    try:
        return MODEL_BUILDERS[cfg.name](in_channels, cfg.hidden, out_channels, **kwargs)
    except (ValueError, TypeError, RuntimeError) as error:
        raise ConfigError(f"cannot build model '{cfg.name}' from the model section: {error}.") from None


def check_backend(cfg: DictConfig, device: torch.device, precision: str = "32") -> None:
    """Check that the ``model`` section's ``backend`` runs on the training ``device`` at ``trainer.precision``: a
    CUDA kernel backend on a CPU run, or under mixed precision, would raise only in the first forward pass, after
    the run directory was cleared.

    Raises:
        ConfigError: the backend does not run on ``device`` here (device type, CuPy, torch's determinism flag), or
            is a kernel backend other than ``gespmm`` (float32/float64 features only) under a mixed ``precision``
            for GraphSAGE or GraphSAINT (GCN's and GAT's layers sum in the float32 of their edge and attention
            weights, as PyG's do; GE-SpMM also takes float16/bfloat16 features).
    """
    if cfg.backend == "auto" or cfg.name not in MODELS:  # the PyG twins do not use model.backend
        return
    mixed = precision not in ("32", "32-true")
    if mixed and cfg.name not in ("gcn", "gat") and cfg.backend in (*KERNEL_BACKENDS, FUSED) \
            and cfg.backend != "gespmm":
        raise ConfigError(
            f"invalid value for 'model.backend': {cfg.backend!r} runs float32 and float64 features, and "
            f"trainer.precision={precision} hands the layers half-precision ones under autocast; use "
            "model.backend=gespmm or auto (GE-SpMM takes float16/bfloat16) or trainer.precision=32."
        )
    try:
        if cfg.backend != FUSED:
            resolve("aggregate", device, cfg.backend)
        elif device.type != "cuda" or not runtime.is_available():  # GAT's fused attention: CUDA kernels
            raise ValueError(f"backend {FUSED!r} runs on cuda tensors with CuPy installed")
    except (ValueError, RuntimeError) as error:
        raise ConfigError(f"invalid value for 'model.backend': this run trains on {device.type}, where "
                          f"{cfg.backend!r} cannot run ({error}); use model.backend=auto.") from None


def build_dataset(cfg: DictConfig) -> NodeDataset:
    """Load the dataset of the ``data`` section.

    Raises:
        ConfigError: unknown dataset name or option (the message lists the valid ones), or a dataset without
            nodes in some split or with fewer than 2 classes (e.g. a tiny synthetic graph).
        graphfuse.data.DatasetNotFoundError: the files are absent and cannot be downloaded.
    """
    try:
        valid = dataset_options(cfg.name)
    except ValueError as error:
        raise ConfigError(f"invalid value for 'data.name': {error}.") from None
    options = OmegaConf.to_container(cfg.options, resolve=True)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        listing = ", ".join(valid) or "(none)"
        raise ConfigError(
            f"unknown option(s) {', '.join(f'data.options.{k}' for k in unknown)} for dataset '{cfg.name}'; "
            f"valid options are: {listing}."
        )
    try:
        dataset = load_dataset(cfg.name, cfg.root, normalize_features=cfg.normalize_features, **options)
    except DatasetNotFoundError:  # an OSError with its own message (the folder, the mirror variable)
        raise
    except (ValueError, TypeError) as error:  # an option value the loader rejects
        raise ConfigError(f"invalid data section for dataset '{cfg.name}': {error}.") from None
    except OSError as error:  # e.g. data.root names a file
        raise ConfigError(f"cannot use data.root={cfg.root!r}: {error}.") from None
    empty = [stage for stage in ("train", "val", "test") if not bool(getattr(dataset, f"{stage}_mask").any())]
    if empty or dataset.num_classes < 2:  # torchmetrics fails on either, deep inside the first epoch
        what = f"no {' and no '.join(empty)} nodes" if empty else f"{dataset.num_classes} class"
        raise ConfigError(f"dataset '{cfg.name}' with these data settings has {what}; training and scoring need "
                          "nodes in every split and at least 2 classes.")
    return dataset


def _sampler_keys(cfg: DictConfig) -> set[str]:
    """The sampler-section keys sampler ``cfg.name`` reads (none but the name for full-graph training)."""
    if cfg.name is None:
        return {"name"}
    if cfg.name == "neighbor":
        return {"name", *NEIGHBOR_LOADER_ARGS}
    return {"name", *SAINT_PARAMS[cfg.name], *SAINT_LOADER_ARGS, "aggr_norm", "cache_dir"}


def uses_mean_weights(cfg: DictConfig) -> bool:
    """Whether the model of the ``model`` section reads its graphs' edge weights as a mean aggregation's
    (GraphSAINT with ``aggr="sum"``; see :class:`~graphfuse.trainers.datamodule.FullGraphDataModule`)."""
    return cfg.name == "saint" and cfg.aggr == "sum"


def build_datamodule(cfg: DictConfig, dataset: NodeDataset) -> FullGraphDataModule:
    """The data module of the run ``cfg``: full-graph when ``sampler.name`` is null, else sampled.

    GraphSAINT samplers take their parameters from :data:`~graphfuse.trainers.config.SAINT_PARAMS`, their
    loader ``num_steps``, ``sample_coverage``, ``norm`` and ``normalize_edges = aggr_norm`` (when the coverage
    is > 0); the neighbour loader takes :data:`~graphfuse.trainers.sampled.NEIGHBOR_LOADER_ARGS`.
    Normalisation coefficients are cached under ``sampler.cache_dir`` (null: ``<data root>/saint_norm``).

    Raises:
        ConfigError: neighbour batches that ``drop_last`` would all drop (``batch_size`` above the training nodes);
            a GraphSAINT ``sampler.cache_dir`` inside ``$GRAPHFUSE_DATA_MIRROR`` (which is only read) or where no
            folder can be made.
    """
    mean_weights = uses_mean_weights(cfg.model)
    sampler = cfg.sampler
    warn_ignored("sampler", sampler, _sampler_keys(sampler), SamplerConfig,
                 "full-graph training" if sampler.name is None else f"sampler {sampler.name!r}")
    if sampler.name is None:
        return FullGraphDataModule(dataset, mean_weights=mean_weights, reorder=cfg.data.reorder)
    plain = OmegaConf.to_container(sampler, resolve=True)
    cache_dir = Path(sampler.cache_dir or Path(cfg.data.root or default_root()) / "saint_norm")
    if sampler.name == "neighbor":
        num_train = int(dataset.train_mask.sum())
        if sampler.drop_last and sampler.batch_size > num_train:
            raise ConfigError(
                f"sampler.batch_size={sampler.batch_size} with sampler.drop_last=true leaves no training batch: "
                f"dataset '{cfg.data.name}' has {num_train} training nodes; lower sampler.batch_size or set "
                "sampler.drop_last=false."
            )
        hops, layers = len(sampler.num_neighbors), cfg.model.num_layers
        if hops != layers:  # fewer: training sees a cut neighbourhood (evaluation the full graph); more: wasted
            log.warning("sampler.num_neighbors has %d hop(s) and model.num_layers=%d: %s", hops, layers,
                        "the deeper layers train on seeds' neighbourhoods cut short" if hops < layers else
                        "the outer hops are sampled and gathered but no layer reaches them")
        sampler_args: dict[str, Any] = {}
        loader_args = {key: plain[key] for key in NEIGHBOR_LOADER_ARGS}
    else:
        sampler_args = {key: plain[key] for key in SAINT_PARAMS[sampler.name]}
        loader_args = {key: plain[key] for key in SAINT_LOADER_ARGS}
        loader_args["normalize_edges"] = bool(sampler.aggr_norm and sampler.sample_coverage > 0)
        try:  # GraphSAINT writes its coefficients there at setup, after the run directory is made
            check_outside_mirror(cache_dir, "sampler.cache_dir", "set sampler.cache_dir to a folder outside it")
            check_cache_dir("sampler.cache_dir", cache_dir)
        except ValueError as error:
            raise ConfigError(f"{error}.") from None
    return SampledDataModule(dataset, sampler.name, sampler_args, loader_args, mean_weights=mean_weights,
                             seed=cfg.seed, cache_dir=cache_dir)
