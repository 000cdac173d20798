"""Config composition: schema defaults, group files, experiments, dotlist overrides and strictness."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from omegaconf.errors import ConfigAttributeError

from graphfuse.data import load_dataset
from graphfuse.graph import Graph
from graphfuse.nn.saint_conv import GraphSAINTConv
from graphfuse.trainers.build import MODEL_BUILDERS, build_datamodule, build_model
from graphfuse.trainers.config import (
    Config,
    ConfigError,
    ModelConfig,
    available,
    config_dir,
    load_config,
    resolved_output_dir,
)


def test_config_dir_holds_the_yaml_files():
    assert (config_dir() / "defaults.yaml").is_file()
    assert {"gcn_cora", "gat_cora", "sage_cora", "gcn_facebook", "gat_facebook", "gcn_synthetic"} <= set(
        available("experiment")
    )


def test_default_is_gcn_cora_with_kipf_hyperparameters():
    cfg = load_config([])
    assert cfg.experiment == "gcn_cora"
    assert (cfg.data.name, cfg.data.normalize_features) == ("cora", True)
    assert (cfg.model.name, cfg.model.hidden, cfg.model.dropout) == ("gcn", 16, 0.5)
    assert (cfg.optim.lr, cfg.optim.weight_decay, cfg.trainer.max_epochs) == (0.01, 5e-4, 200)


def test_experiment_selection_and_its_overrides():
    cfg = load_config(["experiment=gat_cora"])
    assert (cfg.experiment, cfg.model.name, cfg.data.name) == ("gat_cora", "gat", "cora")
    assert (cfg.model.heads, cfg.model.hidden, cfg.model.attn_dropout, cfg.model.activation) == (8, 8, 0.6, "elu")
    assert cfg.optim.lr == 0.005


def test_group_choice_on_the_command_line_beats_the_experiment():
    cfg = load_config(["experiment=gcn_cora", "data=facebook", "model=sage"])
    assert (cfg.data.name, cfg.data.normalize_features) == ("facebook", False)
    assert (cfg.model.name, cfg.model.aggr) == ("sage", "mean")
    assert cfg.model.hidden == 16  # the experiment's override still applies on top of the group file


def test_dotlist_overrides_are_typed_and_last_wins():
    cfg = load_config(["model.hidden=64", "trainer.max_epochs=7", "seed=3", "model.hidden=32",
                       "data.options.num_nodes=500", "model.norm=batch", "output_dir=/tmp/x"])
    assert (cfg.model.hidden, cfg.trainer.max_epochs, cfg.seed) == (32, 7, 3)
    assert cfg.data.options.num_nodes == 500
    assert (cfg.model.norm, cfg.output_dir) == ("batch", "/tmp/x")


@pytest.mark.parametrize("experiment", available("experiment"))
def test_every_experiment_composes_to_a_known_model(experiment):
    cfg = load_config([f"experiment={experiment}"])
    assert cfg.experiment == experiment
    assert cfg.model.name in MODEL_BUILDERS


def test_unknown_key_lists_the_valid_keys_of_its_section():
    with pytest.raises(ConfigError) as info:
        load_config(["model.hiden=64"])
    message = str(info.value)
    assert "model.hiden" in message
    for key in ModelConfig.__dataclass_fields__:
        assert key in message


def test_unknown_top_level_key_lists_the_sections():
    with pytest.raises(ConfigError) as info:
        load_config(["optimizer.lr=0.1"])
    for key in Config.__dataclass_fields__:
        assert key in str(info.value)


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (["seed=abc"], "seed"),
        (["model=gatt"], "gcn"),
        (["experiment=nope"], "gcn_cora"),
        (["optim=adam"], "lr, weight_decay"),
        (["trainer.max_epochs"], "key=value"),
        (["logger.wandb_mode=sometimes"], "offline"),
        (["model.norm=group"], "batch"),
        (["optim.lr=-0.01"], "optim.lr"),
        (["optim.lr=nan"], "optim.lr"),
        (["optim.lr=0"], "'optim.lr': 0.0; it must be finite and > 0"),  # trained nothing, exit 0 (review)
        (["output_dir=''"], "'output_dir': ''; name a folder"),  # silently the default folder (review)
        (["output_dir=' '"], "'output_dir': ' '; name a folder"),
        (["optim.weight_decay=-1"], "optim.weight_decay"),
        (["model.hidden=0"], "model.hidden"),
        (["seed=-1"], "'seed'"),
        (["seed=4294967296"], "'seed': 4294967296; it must be in \\[0, 2\\*\\*32\\)"),
        (["experiment=sage_neighbor_facebook", "sampler.num_neighbors=[10,0]"], "sampler.num_neighbors"),
        (["trainer.devices=2"], "trainer.devices"),
        (["trainer.max_epochs=2", "trainer.check_val_every_n_epoch=10"], "no epoch would be validated"),
        (["trainer.precision=64"], "trainer.precision"),
        (["trainer.precision=bf16-true"], "bf16-mixed"),
        # bad ${...} interpolations were omegaconf tracebacks (exit status 1) when first read
        (["output_dir=${nonexistent}"], "interpolation of 'output_dir': Interpolation key 'nonexistent' not found"),
        (["model.hidden=${data.name}"], "interpolation of 'model.hidden'"),
        (["data.root=${oc.env:GRAPHFUSE_NO_SUCH_VARIABLE}"], "interpolation of 'data.root'"),
        # inf/nan passed and failed inside trainer.fit, after a fresh run had cleared the earlier one (review)
        (["experiment=graphsaint_rw_facebook", "sampler.sample_coverage=inf"], "'sampler.sample_coverage': inf"),
        (["experiment=graphsaint_rw_facebook", "sampler.sample_coverage=nan"], "'sampler.sample_coverage': nan"),
    ],
)
def test_bad_configs_raise_config_error(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_config(overrides)


def test_good_interpolations_are_resolved():
    cfg = load_config(["seed=${trainer.max_epochs}", "output_dir=runs/${model.name}"])
    assert cfg.seed == 200 and cfg.output_dir == "runs/gcn"


def test_config_is_strict_after_composition():
    cfg = load_config([])
    with pytest.raises(ConfigAttributeError):
        cfg.model.hiden = 3


@pytest.mark.parametrize("name", sorted(MODEL_BUILDERS))
def test_build_model_passes_the_section_as_plain_arguments(name):
    cfg = load_config([f"model.name={name}", "model.hidden=4", "model.heads=2"])
    model = build_model(cfg.model, in_channels=5, out_channels=3)
    edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
    out = model(torch.randn(4, 5), Graph(edge_index, num_nodes=4))
    assert out.shape == (4, 3)


def test_build_model_rejects_an_unknown_name():
    cfg = load_config(["model.name=transformer"])
    with pytest.raises(ConfigError, match="gcn, gat, sage"):
        build_model(cfg.model, 5, 3)


def test_build_model_rejects_an_unknown_backend():
    cfg = load_config(["model.backend=foo"])
    with pytest.raises(ConfigError, match="'model.backend': 'foo'; valid backends are: auto, .*reference"):
        build_model(cfg.model, 5, 3)


def test_build_dataset_reports_bad_options_and_roots_as_config_errors(tmp_path):
    from graphfuse.trainers.build import build_dataset

    cfg = load_config(["data=synthetic", "data.options.num_nodes=abc"])
    with pytest.raises(ConfigError, match="invalid data section for dataset 'synthetic': .*num_nodes"):
        build_dataset(cfg.data)  # was a ValueError traceback (exit 1) from the loader
    afile = tmp_path / "afile"
    afile.write_text("")
    cfg = load_config(["data=cora", f"data.root={afile}"])
    with pytest.raises(ConfigError, match="cannot use data.root="):
        build_dataset(cfg.data)


def test_gat_models_take_the_fused_attention_backend():
    assert build_model(load_config(["model=gat", "model.backend=fused"]).model, 5, 3) is not None
    with pytest.raises(ConfigError, match="'model.backend': 'fused'"):
        build_model(load_config(["model.backend=fused"]).model, 5, 3)  # GCN: no fused attention


def test_output_dir_expands_the_home_folder(monkeypatch, tmp_path):
    # as data.root and sampler.cache_dir do: make's sh and quoted arguments pass '~' through, and the run
    # directory was a folder named '~' inside the working directory
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolved_output_dir(load_config(["output_dir=~/runs/a"])) == tmp_path / "runs" / "a"


@pytest.mark.parametrize("options, fragment", [
    (["num_nodes=4", "num_classes=2", "avg_degree=1"], "no val nodes"),  # was torchmetrics' RuntimeError
    (["num_nodes=20", "num_classes=1", "avg_degree=2"], "1 class"),  # was torchmetrics' ValueError
])
def test_build_dataset_refuses_datasets_it_cannot_train_and_score(options, fragment):
    from graphfuse.trainers.build import build_dataset

    cfg = load_config(["data=synthetic", *(f"data.options.{item}" for item in options)])
    with pytest.raises(ConfigError, match=fragment):
        build_dataset(cfg.data)


def test_list_key_given_a_scalar_says_it_takes_a_list():
    # sampler.num_neighbors=5 gave omegaconf's "AnyNode is not a ListConfig, TupleConfig, list, or tuple.."
    with pytest.raises(ConfigError) as error:
        load_config(["experiment=sage_neighbor_facebook", "sampler.num_neighbors=5"])
    message = str(error.value)
    assert "'sampler.num_neighbors'" in message and "sampler.num_neighbors=[15,10,5]" in message
    assert "AnyNode" not in message and ".." not in message
    assert load_config(["experiment=sage_neighbor_facebook", "sampler.num_neighbors=[10,5]"]
                       ).sampler.num_neighbors == [10, 5]


def test_settings_the_chosen_model_or_sampler_does_not_read_are_warned_about(caplog):
    """model.heads=4 on a GCN or sampler.budget on a random-walk sampler were dropped silently while config.yaml
    recorded them; every shipped experiment, with its PyG twin where it has one, reads all it sets."""
    import logging

    from graphfuse.trainers import build
    from graphfuse.trainers.config import ModelConfig, SamplerConfig, available

    def warnings_of(overrides):
        cfg = load_config(overrides)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="graphfuse.trainers.build"):
            build.warn_ignored("model", cfg.model, build._model_keys(cfg.model), ModelConfig, "m")
            build.warn_ignored("sampler", cfg.sampler, build._sampler_keys(cfg.sampler), SamplerConfig, "s")
        return caplog.text

    for name in available("experiment"):
        assert warnings_of([f"experiment={name}"]) == "", name
    assert warnings_of(["experiment=gcn_cora", "model.name=pyg_gcn"]) == ""
    text = warnings_of(["experiment=gcn_cora", "model.heads=4", "model.aggr=max"])
    assert "m does not use model.aggr=max, model.heads=4; they are ignored" in text
    assert "s does not use sampler.budget=10; it is ignored" in warnings_of(
        ["sampler=saint_rw", "model=saint", "model.aggr=sum", "sampler.budget=10"])
    assert "sampler.batch_size=64" in warnings_of(["experiment=gcn_cora", "sampler.batch_size=64"])


def test_overrides_are_read_as_written_not_as_yaml_1_1():
    """omegaconf parses overrides as YAML 1.1: seed=010 was 8, model.hidden=1:30 was 90, output_dir=010 wrote
    to ./8 and logger.name=yes was 'True'."""
    from graphfuse.trainers.config import ConfigError

    cfg = load_config(["output_dir=010", "logger.name=yes", "trainer.precision=32", "output_dir=runs/${seed}/a"])
    assert cfg.output_dir == "runs/0/a" and cfg.logger.name == "yes" and cfg.trainer.precision == "32"
    assert load_config(["output_dir=010"]).output_dir == "010" and load_config(["output_dir=null"]).output_dir is None
    for item, read in (("seed=010", "8"), ("model.hidden=1:30", "90"), ("trainer.max_epochs=0_10", "8"),
                       ("sampler.num_neighbors=[10,010]", "8"), ("sampler.num_neighbors=[1:30]", "90"),
                       ("optim.lr=010", "8"), ("data.options.seed=010", "8"), ("data.options={a: [0_7]}", "7")):
        with pytest.raises(ConfigError, match=f"is not a plain integer; YAML 1.1 would read it as {read}"):
            load_config([item])
    for item in ("data.options.flag=yes", "data.options={a: [On]}", "sampler.num_neighbors=[off]"):
        with pytest.raises(ConfigError, match="YAML 1.1 would read .* as (True|False); write true/false"):
            load_config([item])
    assert load_config(["seed=10", "model.hidden=1_000"]).model.hidden == 1000
    cfg = load_config(["sampler.num_neighbors=[10, 0, -1]", "data.options={a: '010', b: true, c: 'yes'}"])
    assert list(cfg.sampler.num_neighbors) == [10, 0, -1] and cfg.data.options == {"a": "010", "b": True, "c": "yes"}
    assert load_config(["trainer.deterministic=yes"]).trainer.deterministic is True
    with pytest.raises(ConfigError, match="unknown config key 'model.hiden'"):
        load_config(["model.hiden=010"])


def test_a_hydra_plus_before_a_key_is_dropped():
    """+data.options.seed=1 was "unknown config key '+data'", listing data among the valid keys; ++ (Hydra's add or
    override) was "unknown config key '+model'" (review)."""
    cfg = load_config(["+data.options.seed=1", "+model.hidden=8", "+model=gat"])
    assert cfg.data.options == {"seed": 1} and cfg.model.hidden == 8 and cfg.model.name == "gat"
    cfg = load_config(["++model.hidden=3", "++trainer.max_epochs=7"])
    assert cfg.model.hidden == 3 and cfg.trainer.max_epochs == 7


def test_group_files_an_experiment_file_names_are_found_beside_it(tmp_path, monkeypatch):
    """They were read relative to the working directory: experiment=exp/mine.yaml naming model: my_model.yaml
    beside it failed unless run from inside exp/ (review)."""
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "mine.yaml").write_text("defaults:\n  model: my_model.yaml\n")
    (tmp_path / "exp" / "my_model.yaml").write_text("name: sage\nhidden: 9\n")
    (tmp_path / "cli_model.yaml").write_text("name: gat\n")
    monkeypatch.chdir(tmp_path)
    cfg = load_config(["experiment=exp/mine.yaml"])
    assert (cfg.model.name, cfg.model.hidden) == ("sage", 9)
    assert load_config(["experiment=exp/mine.yaml", "model=cli_model.yaml"]).model.name == "gat"  # the working dir


def test_a_choice_ending_in_yaml_is_the_users_own_file(tmp_path, monkeypatch):
    """Found by review: a wheel install looked only in site-packages' configs/, and 'experiment=/a/b' joined as a
    path by accident, its run directory becoming /a/b/seed0."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_exp.yaml").write_text("defaults:\n  model: my_model.yml\nmodel:\n  hidden: 12\n")
    (tmp_path / "my_model.yml").write_text("name: sage\naggr: max\n")
    cfg = load_config(["experiment=my_exp.yaml", "seed=3"])
    assert (cfg.experiment, cfg.model.name, cfg.model.aggr, cfg.model.hidden) == ("my_exp.yaml", "sage", "max", 12)
    assert resolved_output_dir(cfg) == Path("runs") / "my_exp" / "seed3"
    assert load_config([f"experiment={tmp_path / 'my_exp.yaml'}"]).model.hidden == 12
    with pytest.raises(ConfigError, match="experiment file 'nope.yaml' not found"):
        load_config(["experiment=nope.yaml"])
    with pytest.raises(ConfigError, match=r"unknown experiment '/tmp/x': a choice is a name from the package's "
                       r"configs/experiment/ \(.*gcn_cora.*\) or the path of a .yaml file"):
        load_config(["experiment=/tmp/x"])
    with pytest.raises(ConfigError, match="unknown model '../model/gat'"):
        load_config(["model=../model/gat"])


def test_the_largest_seed_is_accepted():
    assert load_config(["seed=4294967295"]).seed == 2**32 - 1  # the bound itself is refused (above)


def test_model_backend_reaches_the_layers():
    for name in ("gcn", "sage", "gat", "saint"):
        cfg = load_config(["data=synthetic", f"model={name}", "model.backend=reference"])
        model = build_model(cfg.model, 4, 3)
        assert {conv.backend for conv in model.convs} == {"reference"}, name


@pytest.mark.parametrize("item", ["output_dir=", "sampler.name=", "model.hidden= "])
def test_an_override_without_a_value_is_refused(item):
    """``output_dir=$OUT`` with OUT unset read as null: the run went to the default folder (and ``sampler.name=``
    silently trained on the full graph)."""
    key = item.partition("=")[0]
    with pytest.raises(ConfigError, match=f"no value after '='; write {key}=null for null"):
        load_config(["sampler=neighbor", item])


@pytest.mark.parametrize("item", ["sampler.replace=2", "data.normalize_features=-3", "trainer.resume=1",
                                  "logger.wandb='true'"])
def test_a_boolean_key_takes_only_a_boolean(item):
    key = item.partition("=")[0]
    with pytest.raises(ConfigError, match=f"{key} is a boolean; write true or false"):
        load_config(["sampler=neighbor", item])
    assert load_config(["sampler=neighbor", f"{key}=True"])[key.split(".")[0]][key.split(".")[1]] is True


def test_overrides_must_be_a_list_of_strings():
    with pytest.raises(TypeError, match="overrides must be a list of key=value strings; got the string 'seed=1'"):
        load_config("seed=1")
    with pytest.raises(TypeError, match="overrides must be key=value strings; got int 1"):
        load_config([1])


SAINT_RW = ["data=synthetic", "sampler=saint_rw", "model=saint", "model.aggr=sum", "sampler.roots=10"]


def test_random_walks_of_length_zero_compose_and_negative_ones_do_not(tmp_path):
    """walk_length 0 (the roots alone) is a valid GraphSAINT random-walk sampler; -1 is not."""
    cfg = load_config([*SAINT_RW, "sampler.walk_length=0", "sampler.sample_coverage=1", f"sampler.cache_dir={tmp_path}"])
    assert cfg.sampler.walk_length == 0
    dm = build_datamodule(cfg, load_dataset("synthetic", num_nodes=100, num_features=4, num_classes=3))
    assert next(iter(dm.train_dataloader())).num_nodes <= 10  # at most the 10 roots
    with pytest.raises(ConfigError, match="invalid value for 'sampler.walk_length': -1; .* needs it >= 0"):
        load_config([*SAINT_RW, "sampler.walk_length=-1"])


def test_the_saint_mean_model_aggregates_over_an_unweighted_graph():
    """Mean weights (1 / in-degree) are for the sum model only: GraphSAINTConv(aggr="mean") divides the weighted
    sum by the in-degree itself, so with them it would divide twice. Sum over the weighted graph = mean over the
    plain one; mean over the mean model's graph = mean over the plain one."""
    ds = load_dataset("synthetic", num_nodes=100, num_features=4, num_classes=3)
    plain = Graph(ds.edge_index, num_nodes=ds.num_nodes)
    torch.manual_seed(0)
    conv = GraphSAINTConv(4, 3, aggr="mean")
    want = conv(ds.x, plain)
    for aggr in ("mean", "sum"):
        dm = build_datamodule(load_config(["data=synthetic", "model=saint", f"model.aggr={aggr}"]), ds)
        dm.setup()
        conv.aggr = aggr
        torch.testing.assert_close(conv(ds.x, dm.batch.graph), want)
