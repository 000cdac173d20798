"""The config schema and its composition from YAML files and command-line overrides.

A run's config is ``OmegaConf.merge`` of, in order: the structured schema below (types and defaults),
``configs/defaults.yaml``, the chosen group files (``configs/data/<name>.yaml`` under ``data``,
``configs/model/<name>.yaml`` under ``model``, ``configs/trainer/<name>.yaml`` under ``trainer``,
``configs/sampler/<name>.yaml`` under ``sampler``), the
experiment file ``configs/experiment/<name>.yaml`` and the command-line dotlist. Group choices come from the
``defaults:`` mapping of defaults.yaml, then of the experiment file, then from command-line items such as
``model=gat``; ``experiment=gat_cora`` chooses the experiment. A choice ending in .yaml or .yml is the path of the
user's own file instead (``experiment=my_exp.yaml``, relative to the working directory; a group file named in an
experiment file's ``defaults:``, relative to that file's folder), so a wheel install, whose
configs/ sits in site-packages, takes new experiments too. Every other item is a dotlist override
(``model.hidden=64``). The schema is strict: an unknown key or a value of the wrong type raises
:class:`ConfigError` naming the key and listing the valid ones.

Only trainers/ sees this config; trainers/build.py turns each section into plain constructor arguments.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException, ValidationError

GROUPS = ("data", "model", "trainer", "sampler")
"""Config groups: a YAML file per choice under configs/<group>/, merged into the section of that name."""


class ConfigError(ValueError):
    """A config that cannot be composed or validated; the message is one paragraph meant for the user."""


@dataclass
class DataConfig:
    """Which dataset to load and how (``graphfuse.data.load_dataset`` arguments)."""

    name: str = "cora"
    root: str | None = None
    normalize_features: bool = False
    reorder: bool = False  # full-graph runs: renumber nodes by graph clustering once, on the device
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class ModelConfig:
    """The model (``graphfuse.nn.MODELS`` or a ``pyg_*`` reference twin) and its hyper-parameters.

    ``heads``/``out_heads``/``attn_dropout`` apply to GAT models, ``aggr`` to GraphSAGE and GraphSAINT,
    ``jk`` (jumping-knowledge output) and ``normalize`` (L2-normalised rows before the classifier) to GraphSAINT;
    ``backend`` is the aggregation engine backend of every layer (``"auto"`` lets the engine choose). A
    GraphSAINT model with ``aggr: sum`` gets edge weights ``1/in_deg(target)`` on its graphs, so that its
    weighted sum is a mean on the full graph and GraphSAINT's aggregation normalisation can scale it in batches.
    """

    name: str = "gcn"
    hidden: int = 16
    num_layers: int = 2
    dropout: float = 0.5
    activation: str = "relu"
    norm: str | None = None
    heads: int = 8
    out_heads: int = 1
    attn_dropout: float = 0.6
    aggr: str = "mean"
    jk: bool = False
    normalize: bool = True
    backend: str = "auto"


@dataclass
class OptimConfig:
    """Adam's learning rate and L2 weight decay."""

    lr: float = 0.01
    weight_decay: float = 5e-4


@dataclass
class TrainerConfig:
    """Lightning Trainer settings plus early stopping, resume and progress display.

    ``patience`` is the number of validation checks without a better ``val/acc`` before stopping (epochs when
    ``check_val_every_n_epoch`` is 1); 0 or None turns early stopping off. Validation runs every
    ``check_val_every_n_epoch`` epochs (the best checkpoint is chosen at those epochs; ``last.ckpt`` is written
    after every epoch). ``resume`` continues from ``<output_dir>/checkpoints/last.ckpt`` (with this run's
    ``patience`` and ``max_epochs``).
    """

    max_epochs: int = 200
    patience: int | None = 0
    accelerator: str = "auto"
    devices: int = 1
    deterministic: bool = False
    resume: bool = False
    progress_bar: bool = True
    model_summary: bool = True
    log_every_n_steps: int = 1
    check_val_every_n_epoch: int = 1
    precision: str = "32"


@dataclass
class SamplerConfig:
    """How training batches are drawn: ``name`` null trains on the full graph; otherwise a sampler of
    ``graphfuse.samplers`` draws the training batches and validation and test run on the full graph.

    GraphSAINT samplers (``saint_rw``: ``roots`` and ``walk_length``; ``saint_node`` and ``saint_edge``:
    ``budget``) draw ``num_steps`` subgraphs per epoch. ``sample_coverage`` > 0 pre-samples the normalisation
    coefficients (cached under ``cache_dir``, null: ``<data root>/saint_norm``) in convention ``norm``
    (``pyg`` or ``paper``): the loss is weighted by ``node_norm`` and, with ``aggr_norm``, the batch graph's
    edge weights are ``edge_norm`` times the model's own weights (this needs ``model.name=saint`` with
    ``model.aggr=sum``). ``neighbor`` draws ``batch_size`` training seeds per batch with fan-outs
    ``num_neighbors`` (one per hop, -1 = all), as PyG's NeighborLoader (``replace``, ``subgraph_type``,
    ``disjoint``, ``shuffle``, ``drop_last``).
    """

    name: str | None = None
    roots: int = 3000
    walk_length: int = 2
    budget: int = 6000
    num_steps: int = 5
    sample_coverage: float = 50.0
    norm: str = "pyg"
    aggr_norm: bool = True
    cache_dir: str | None = None
    num_neighbors: list[int] = field(default_factory=lambda: [15, 10, 5])
    batch_size: int = 1024
    replace: bool = False
    subgraph_type: str = "directional"
    disjoint: bool = False
    shuffle: bool = True
    drop_last: bool = False


@dataclass
class LoggerConfig:
    """Experiment loggers: CSV always; Weights & Biases when ``wandb`` is true and the package is installed."""

    wandb: bool = True
    wandb_mode: str = "offline"
    project: str = "graphfuse"
    name: str | None = None


@dataclass
class Config:
    """A full training run. ``output_dir`` defaults to ``runs/<experiment>/seed<seed>``."""

    experiment: str = "gcn_cora"
    seed: int = 0
    output_dir: str | None = None
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)


SAMPLERS = (None, "saint_rw", "saint_node", "saint_edge", "neighbor")
"""Valid ``sampler.name`` values (None: full-graph training); trainers/build.py maps them to loaders."""
PRECISIONS = ("32", "32-true", "16-mixed", "bf16-mixed", "16", "bf16")
"""Valid ``trainer.precision`` values: float32 or mixed precision. Lightning's true half and double precisions
(``16-true``, ``bf16-true``, ``64-true``) convert every batch with ``apply_to_collection``, which refuses
graphfuse's frozen batch dataclasses."""
SAINT_PARAMS = {"saint_rw": ("roots", "walk_length"), "saint_node": ("budget",), "saint_edge": ("budget",)}
"""The sampler-section keys each GraphSAINT sampler is constructed from."""
_CHOICES = {
    ("logger", "wandb_mode"): ("offline", "online", "disabled"),
    ("model", "norm"): (None, "batch", "layer"),
    ("sampler", "name"): SAMPLERS,
    ("sampler", "norm"): ("pyg", "paper"),
    ("sampler", "subgraph_type"): ("directional", "bidirectional", "induced"),
    ("trainer", "precision"): PRECISIONS,
}


def config_dir() -> Path:
    """The directory holding defaults.yaml and the group folders: configs/ beside trainers/ — the repository's
    configs/ in a source or editable install, the ``graphfuse.configs`` package data in a wheel install."""
    return Path(__file__).resolve().parent.parent / "configs"


def is_yaml_path(choice: str) -> bool:
    """Whether a group or experiment choice names the user's own YAML file rather than one of the package's."""
    return choice.endswith((".yaml", ".yml"))


def available(group: str) -> list[str]:
    """Names of the YAML files of ``group`` (``"data"``, ``"model"``, ``"trainer"``, ``"sampler"`` or
    ``"experiment"``)."""
    return sorted(p.stem for p in (config_dir() / group).glob("*.yaml"))


def _schema_keys(path: str) -> list[str]:
    node = OmegaConf.structured(Config)
    if path:
        node = OmegaConf.select(node, path)
    return list(node.keys()) if isinstance(node, DictConfig) else []


def _first_line(error: Exception) -> str:
    """The first line of ``error``'s message without its closing period (the messages add their own)."""
    return str(error).splitlines()[0].rstrip(".") if str(error) else type(error).__name__


def _merge(cfg: DictConfig, other: Any, source: str) -> DictConfig:
    """``OmegaConf.merge`` turning omegaconf's errors into one-paragraph :class:`ConfigError` messages."""
    try:
        return OmegaConf.merge(cfg, other)
    except ConfigKeyError as error:
        full_key = getattr(error, "full_key", None) or ""
        parent, _, _key = full_key.rpartition(".")
        section = f"section '{parent}'" if parent else "the top level"
        valid = ", ".join(_schema_keys(parent)) or "(none: it is a value, not a section)"
        raise ConfigError(
            f"unknown config key '{full_key}' (from {source}); valid keys of {section} are: {valid}."
        ) from None
    except ValidationError as error:
        full_key = getattr(error, "full_key", None) or "?"
        try:
            default = OmegaConf.select(OmegaConf.structured(Config), full_key)
        except OmegaConfBaseException:
            default = None
        if isinstance(default, ListConfig):  # omegaconf: "AnyNode is not a ListConfig, TupleConfig, list, ..."
            example = ",".join(str(v) for v in default)
            raise ConfigError(f"invalid value for '{full_key}' (from {source}): it takes a list, e.g. "
                              f"{full_key}=[{example}].") from None
        raise ConfigError(f"invalid value for '{full_key}' (from {source}): {_first_line(error)}.") from None
    except OmegaConfBaseException as error:
        raise ConfigError(f"cannot apply {source}: {_first_line(error)}.") from None
    except TypeError as error:  # e.g. sampler.num_neighbors[0]=3: omegaconf cannot merge a dict into a list
        raise ConfigError(f"cannot apply {source}: {_first_line(error)}; a list is set whole (e.g. "
                          "sampler.num_neighbors=[15,10,5]) and a section key by key (e.g. data.options.seed=1)."
                          ) from None


def _field_type(key: str) -> Any:
    """The schema type of the dotted ``key`` (``model.hidden`` → int), or None where the schema has none."""
    cls: Any = Config
    parts = key.split(".")
    for depth, part in enumerate(parts):
        hints = typing.get_type_hints(cls) if dataclasses.is_dataclass(cls) else {}
        if part not in hints:
            return None
        if depth == len(parts) - 1:
            return hints[part]
        cls = hints[part]
    return None


_YAML11_INT = re.compile(r"[+-]?(0[0-9_]+|[0-9_]+(:[0-9_]+)+)")
"""Integers YAML 1.1 reads otherwise than written: a leading zero is octal (010 → 8), colons base 60 (1:30 → 90)."""
_YAML11_BOOL = re.compile(r"yes|no|on|off", re.IGNORECASE)
"""Words YAML 1.1 reads as booleans where YAML 1.2 and JSON keep a string."""
_BOOL_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "~"}
"""What a boolean field's override may say (any case); omegaconf would read an integer as a boolean too."""


def _yaml12(item: str) -> str:
    """A ``key=value`` override read as written, not as YAML 1.1 would: a string field's value stays a string
    (``output_dir=010``, ``logger.name=yes``); an integer with a leading zero (octal) or colons (base 60) is
    refused wherever it stands (``seed=010`` was 8, ``model.hidden=1:30`` 90, ``sampler.num_neighbors=[010,10]``
    [8, 10]); so is a bare yes/no/on/off outside a bool field (``data.options.x=yes`` was True)."""
    key, _, value = item.partition("=")
    kind = _field_type(key)
    if kind in (bool, bool | None) and value.strip().lower() not in _BOOL_WORDS:  # omegaconf reads 2 as True
        raise ConfigError(f"bad override '{item}': {key} is a boolean; write true or false.")
    if kind in (str, str | None) and value not in ("null", "~", "") and value[:1] not in ("'", '"'):
        return f"{key}={json.dumps(value)}"
    if kind is None and not key.startswith("data.options."):
        return item  # an unknown key: the merge names it
    try:
        plain = [t.value for t in yaml.scan(value) if isinstance(t, yaml.ScalarToken) and t.plain]
    except yaml.YAMLError:  # malformed: from_dotlist names it
        return item
    for text in plain:
        if _YAML11_INT.fullmatch(text):
            raise ConfigError(f"bad override '{item}': {text!r} is not a plain integer; YAML 1.1 would read it as "
                              f"{yaml.safe_load(text)!r} (a leading zero is octal, colons are base 60). Write the "
                              "number without them, or quote it for a string.")
        if _YAML11_BOOL.fullmatch(text) and kind not in (bool, bool | None):
            raise ConfigError(f"bad override '{item}': YAML 1.1 would read {text!r} as {yaml.safe_load(text)!r}; "
                              f"write true/false for a boolean, or quote it ('{text}') for a string.")
    return item


def _load_yaml(path: Path, what: str) -> DictConfig:
    try:
        loaded = OmegaConf.load(path)
    except (OSError, yaml.YAMLError, OmegaConfBaseException) as error:
        raise ConfigError(f"cannot read {what} {path}: {_first_line(error)}.") from None
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"{what} {path} must hold a mapping; got {type(loaded).__name__}.")
    return loaded


def _group_file(group: str, name: str, base: Path | None = None) -> Path:
    """The package's ``configs/<group>/<name>.yaml``, or the user's own file when ``name`` is a path ending in
    .yaml or .yml (relative to ``base``: the folder of the experiment file naming it, else the working
    directory)."""
    if is_yaml_path(name):
        path = Path(name).expanduser()
        if base is not None and not path.is_absolute():
            path = base / path
        if not path.is_file():
            raise ConfigError(f"{group} file '{name}' not found (a choice ending in .yaml is read as a path).")
        return path
    if "/" in name or "\\" in name:
        raise ConfigError(f"unknown {group} '{name}': a choice is a name from the package's configs/{group}/ "
                          f"({', '.join(available(group)) or 'none'}) or the path of a .yaml file.")
    path = config_dir() / group / f"{name}.yaml"
    if not path.is_file():
        choices = ", ".join(available(group)) or "(none)"
        raise ConfigError(f"unknown {group} '{name}': no file {path}; available {group} choices are: {choices}.")
    return path


def _pop_defaults(node: DictConfig, source: str) -> dict[str, str]:
    if "defaults" not in node:
        return {}
    defaults = node.pop("defaults")
    if not isinstance(defaults, DictConfig) or any(k not in GROUPS for k in defaults):
        raise ConfigError(
            f"'defaults' of {source} must be a mapping from group to choice with groups among {', '.join(GROUPS)}; "
            f"got {OmegaConf.to_container(defaults) if OmegaConf.is_config(defaults) else defaults!r}."
        )
    return {str(k): str(v) for k, v in defaults.items()}


def split_overrides(overrides: Iterable[str]) -> tuple[dict[str, str], list[str]]:
    """Split command-line items into group/experiment choices and dotlist overrides (a Hydra-style ``+`` or
    ``++`` before a key is dropped).

    Raises:
        ConfigError: an item is not of the form ``key=value``, or has no value.
        TypeError: ``overrides`` is a string, or holds an item that is not one.
    """
    if isinstance(overrides, str):  # iterating it would split it into characters
        raise TypeError(f"overrides must be a list of key=value strings; got the string {overrides!r}")
    choices: dict[str, str] = {}
    dotlist: list[str] = []
    for item in overrides:
        if not isinstance(item, str):
            raise TypeError(f"overrides must be key=value strings; got {type(item).__name__} {item!r}")
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"bad override '{item}': every item must be key=value, e.g. experiment=gat_cora, model=gat or "
                "model.hidden=64."
            )
        key = key.strip().lstrip("+")  # Hydra's "+" (add) and "++" (add or override): every key exists here
        if not value.strip():  # e.g. output_dir=$OUT with OUT unset: omegaconf would read null, the default
            raise ConfigError(f"bad override '{item}': no value after '='; write {key}=null for null, or quote an "
                              f"empty string ({key}='').")
        if key in GROUPS or key == "experiment":
            choices[key] = value.strip()
        else:
            dotlist.append(f"{key}={value}")
    return choices, dotlist


def _validate_sampler(cfg: DictConfig) -> None:
    sampler = cfg.sampler
    if sampler.name is None:
        return
    if cfg.data.reorder:
        raise ConfigError(f"'data.reorder' applies to full-graph training; sampler '{sampler.name}' draws its own "
                          "subgraphs (set data.reorder=false or sampler=full_graph).")
    if sampler.name == "neighbor":
        keys = ("batch_size",)
        if cfg.model.name == "saint" and cfg.model.aggr == "sum":
            raise ConfigError(
                "sampler=neighbor with model.name=saint needs model.aggr=mean (the mean over each node's sampled "
                "in-neighbours); model.aggr=sum reads full-graph mean weights, which a neighbour batch does not "
                "keep unbiased."
            )
        hops = list(sampler.num_neighbors)
        if not hops or any(k == 0 or k < -1 for k in hops):
            raise ConfigError(f"invalid value for 'sampler.num_neighbors': {hops}; it must be a non-empty list of "
                              "fan-outs, each >= 1 or -1 (all neighbours).")
    else:
        keys = ("num_steps", *SAINT_PARAMS[sampler.name])
        if not (math.isfinite(sampler.sample_coverage) and sampler.sample_coverage >= 0):  # inf/nan: at fit
            raise ConfigError(f"invalid value for 'sampler.sample_coverage': {sampler.sample_coverage}; it must be "
                              "a finite number >= 0 (0: no normalisation).")
        if sampler.aggr_norm and sampler.sample_coverage > 0 and not (cfg.model.name == "saint"
                                                                      and cfg.model.aggr == "sum"):
            raise ConfigError(
                f"sampler.aggr_norm=true puts GraphSAINT's aggregation normalisation into the batch graphs' edge "
                f"weights, which only model.name=saint with model.aggr=sum reads; got model.name={cfg.model.name} "
                f"with model.aggr={cfg.model.aggr}. Use model=saint model.aggr=sum, or sampler.aggr_norm=false "
                "(loss normalisation only)."
            )
        if cfg.model.name == "saint" and cfg.model.aggr == "sum" and not (sampler.aggr_norm
                                                                          and sampler.sample_coverage > 0):
            raise ConfigError(
                f"sampler={sampler.name} with model.name=saint and model.aggr=sum needs GraphSAINT's aggregation "
                "normalisation (sampler.aggr_norm=true and sampler.sample_coverage > 0): without it the batch "
                "graphs keep full-graph mean weights, and their sums over a subgraph's in-edges are biased (as "
                "for sampler=neighbor). Turn it on, or use model.aggr=mean."
            )
    for key in keys:
        minimum = 0 if key == "walk_length" else 1
        if sampler[key] < minimum:
            raise ConfigError(f"invalid value for 'sampler.{key}': {sampler[key]}; the {sampler.name} sampler "
                              f"needs it >= {minimum}.")


def validate_config(cfg: DictConfig) -> None:
    """Check the values of a composed config (what :func:`load_config` does last; :func:`~graphfuse.trainers.run.train`
    checks again, for a config changed after loading).

    Raises:
        ConfigError: a value out of range or not among a key's choices, or settings that contradict each other.
    """
    for (section, key), choices in _CHOICES.items():
        value = cfg[section][key]
        if value not in choices:
            valid = ", ".join("null" if c is None else c for c in choices)
            raise ConfigError(f"invalid value for '{section}.{key}': {value!r}; valid values are: {valid}.")
    for key in ("max_epochs", "devices", "log_every_n_steps", "check_val_every_n_epoch"):
        if cfg.trainer[key] < 1:
            raise ConfigError(f"invalid value for 'trainer.{key}': {cfg.trainer[key]}; it must be >= 1.")
    if cfg.trainer.patience is not None and cfg.trainer.patience < 0:
        raise ConfigError(f"invalid value for 'trainer.patience': {cfg.trainer.patience}; use 0 or null for off.")
    if cfg.trainer.devices != 1:
        raise ConfigError(f"invalid value for 'trainer.devices': {cfg.trainer.devices}; runs train on one device "
                          "(several would each train the whole graph and write the same run directory).")
    if cfg.trainer.check_val_every_n_epoch > cfg.trainer.max_epochs:
        raise ConfigError(
            f"invalid value for 'trainer.check_val_every_n_epoch': {cfg.trainer.check_val_every_n_epoch} is more "
            f"than trainer.max_epochs={cfg.trainer.max_epochs}: no epoch would be validated (nor checkpointed as best)."
        )
    if not math.isfinite(cfg.optim.lr) or cfg.optim.lr <= 0:  # lr=0 trained nothing and exited 0
        raise ConfigError(f"invalid value for 'optim.lr': {cfg.optim.lr}; it must be finite and > 0.")
    if not math.isfinite(cfg.optim.weight_decay) or cfg.optim.weight_decay < 0:
        raise ConfigError(f"invalid value for 'optim.weight_decay': {cfg.optim.weight_decay}; it must be finite "
                          "and >= 0.")
    if cfg.output_dir is not None and not cfg.output_dir.strip():
        raise ConfigError(f"invalid value for 'output_dir': {cfg.output_dir!r}; name a folder, or leave it unset "
                          "(null) for runs/<experiment>/seed<seed>.")
    if cfg.model.hidden < 1:
        raise ConfigError(f"invalid value for 'model.hidden': {cfg.model.hidden}; it must be >= 1.")
    if not 0 <= cfg.seed < 2**32:
        raise ConfigError(f"invalid value for 'seed': {cfg.seed}; it must be in [0, 2**32).")
    _validate_sampler(cfg)


def load_config(overrides: Iterable[str] = ()) -> DictConfig:
    """Compose a run's config from the YAML files and ``overrides`` (command-line items).

    Args:
        overrides: items ``group=choice`` (``data``, ``model``, ``trainer``, ``sampler``), ``experiment=name`` or dotlist
            ``key.sub=value``.

    Returns:
        The merged, schema-typed config (struct mode: unknown keys are rejected).

    Raises:
        ConfigError: unknown key, wrong type, unknown group choice or experiment, malformed item.
        TypeError: ``overrides`` is a string, or holds an item that is not one.

    Example:
        >>> cfg = load_config(["experiment=gat_cora", "model.hidden=16", "trainer.max_epochs=50"])
    """
    choices, dotlist = split_overrides(overrides)
    root = config_dir()
    base = _load_yaml(root / "defaults.yaml", "defaults file")
    groups = _pop_defaults(base, "defaults.yaml")
    experiment = choices.get("experiment", base.get("experiment", "gcn_cora"))
    exp_path = _group_file("experiment", experiment)
    exp_cfg = _load_yaml(exp_path, "experiment file")
    from_experiment = _pop_defaults(exp_cfg, f"experiment '{experiment}'")
    groups.update(from_experiment)
    groups.update({k: v for k, v in choices.items() if k in GROUPS})

    cfg = OmegaConf.structured(Config)
    cfg = _merge(cfg, base, "defaults.yaml")
    for group in GROUPS:
        if group in groups:  # a file an experiment file names is found beside it
            beside = exp_path.parent if from_experiment.get(group) == groups[group] and group not in choices else None
            path = _group_file(group, groups[group], beside)
            cfg = _merge(cfg, {group: _load_yaml(path, f"{group} file")}, f"{group}/{path.name}")
    cfg = _merge(cfg, exp_cfg, f"experiment/{exp_path.name}")
    cfg = _merge(cfg, {"experiment": experiment}, "the experiment choice")
    for item in dotlist:
        key = item.partition("=")[0]
        if "." not in key and _schema_keys(key):
            raise ConfigError(
                f"bad override '{item}': '{key}' is a section, not a value; set its keys as {key}.<key>=value "
                f"with <key> one of: {', '.join(_schema_keys(key))}."
            )
    dotlist = [_yaml12(item) for item in dotlist]
    try:
        cli = OmegaConf.from_dotlist(dotlist)
    except OmegaConfBaseException as error:
        raise ConfigError(f"cannot parse overrides {dotlist}: {_first_line(error)}.") from None
    cfg = _merge(cfg, cli, "the command line")
    try:  # ${...} interpolations, resolved once here: a bad one is a bad config, not a traceback later
        OmegaConf.resolve(cfg)
    except OmegaConfBaseException as error:
        key = getattr(error, "full_key", None)
        where = f" of '{key}'" if key else ""
        raise ConfigError(f"cannot resolve the interpolation{where}: {_first_line(error)}.") from None
    validate_config(cfg)
    OmegaConf.set_struct(cfg, True)
    return cfg


def resolved_output_dir(cfg: DictConfig) -> Path:
    """``cfg.output_dir`` (``~`` expanded, as in ``data.root``), or ``runs/<experiment>/seed<seed>`` when unset (the
    file's stem for an experiment given as a .yaml path)."""
    if cfg.output_dir:
        return Path(cfg.output_dir).expanduser()
    name = Path(cfg.experiment).stem if is_yaml_path(cfg.experiment) else cfg.experiment
    return Path("runs") / name / f"seed{cfg.seed}"


def last_checkpoint(cfg: DictConfig) -> Path:
    """``<output_dir>/checkpoints/last.ckpt``: the run's latest finished epoch, what ``trainer.resume`` reads."""
    return resolved_output_dir(cfg) / "checkpoints" / "last.ckpt"
