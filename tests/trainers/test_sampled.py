"""Sampled training: each sampler trains end to end, node_norm weights the loss, bad samplers exit 2, resume."""

from __future__ import annotations

import csv
import json

import pytest
import torch
import torch.nn.functional as F

from graphfuse.data import load_dataset
from graphfuse.graph import Graph
from graphfuse.samplers import Batch
from graphfuse.trainers.build import build_datamodule
from graphfuse.trainers.cli import main
from graphfuse.trainers.config import ConfigError, available, load_config
from graphfuse.trainers.datamodule import FullGraphBatch
from graphfuse.trainers.module import node_loss, target_rows
from graphfuse.trainers.run import train
from graphfuse.trainers.sampled import SampledDataModule, training_mean_edge_weight

SAINT = ["model=saint", "model.aggr=sum", "model.hidden=8", "sampler.sample_coverage=5"]
SAMPLER_RUNS = {
    "saint_rw": [*SAINT, "sampler=saint_rw", "sampler.roots=20", "sampler.num_steps=3"],
    "saint_node": [*SAINT, "sampler=saint_node", "sampler.budget=60", "sampler.num_steps=3"],
    "saint_edge": [*SAINT, "sampler=saint_edge", "sampler.budget=40", "sampler.num_steps=3", "sampler.norm=paper"],
    "neighbor": ["model=sage", "sampler=neighbor", "sampler.num_neighbors=[5,3]", "sampler.batch_size=16"],
}


@pytest.fixture
def sampled(tiny, tmp_path):
    """Tiny-run overrides with the normalisation cache in ``tmp_path``."""
    return [*tiny, f"sampler.cache_dir={tmp_path / 'saint_norm'}"]


@pytest.mark.parametrize("name", sorted(SAMPLER_RUNS))
def test_each_sampler_trains_and_writes_the_run_directory(name, sampled, tmp_path):
    metrics = train(load_config([*sampled, *SAMPLER_RUNS[name], "trainer.max_epochs=2"]), verbose=False)
    run = tmp_path / "run"
    assert metrics["sampler"] == name and metrics["epochs_run"] == 2
    assert json.loads((run / "metrics.json").read_text())["sampler"] == name
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert any(p.name.startswith("best-") for p in (run / "checkpoints").iterdir())
    for stage in ("train", "val", "test"):
        assert 0.0 <= metrics[stage]["acc"] <= 1.0 and metrics[stage]["loss"] == pytest.approx(
            metrics[stage]["loss"])  # a number, not NaN
    if name != "neighbor":
        assert any((tmp_path / "saint_norm").iterdir())  # normalisation cached on disk


def test_resume_of_a_sampled_run_continues_and_draws_the_same_batches(sampled, tmp_path):
    # Without dropout the only randomness is the sampler's: the resumed run must then match a straight one.
    overrides = [*sampled, *SAMPLER_RUNS["saint_rw"], "model.dropout=0"]
    first = train(load_config([*overrides, "trainer.max_epochs=1"]), verbose=False)
    resumed = train(load_config([*overrides, "trainer.max_epochs=2", "trainer.resume=true"]), verbose=False)
    assert first["epochs_run"] == 1 and resumed["epochs_run"] == 2 and resumed["epochs_this_run"] == 1
    straight = train(load_config([*overrides, "trainer.max_epochs=2", f"output_dir={tmp_path / 'straight'}"]),
                     verbose=False)
    assert resumed["test"]["loss"] == pytest.approx(straight["test"]["loss"], rel=1e-5)


def test_unknown_sampler_exits_2_listing_the_valid_ones(capsys, tiny):
    assert main([*tiny, "sampler.name=saint_walk"]) == 2
    err = capsys.readouterr().err.replace("\n", " ")
    assert "sampler.name" in err and "saint_rw" in err and "neighbor" in err and "Traceback" not in err


def test_unknown_sampler_group_choice_lists_the_files():
    with pytest.raises(ConfigError, match="saint_node"):
        load_config(["sampler=saint_walk"])
    assert {"full_graph", "saint_rw", "saint_node", "saint_edge", "neighbor"} <= set(available("sampler"))


def test_aggregation_normalisation_needs_the_saint_sum_model():
    with pytest.raises(ConfigError, match="model.aggr=sum"):
        load_config(["sampler=saint_rw", "model=gcn"])
    cfg = load_config(["sampler=saint_rw", "model=gcn", "sampler.aggr_norm=false"])
    assert cfg.sampler.name == "saint_rw"
    with pytest.raises(ConfigError, match="model.aggr=mean"):
        load_config(["sampler=neighbor", "model=saint"])


def test_reorder_is_for_full_graph_training():
    with pytest.raises(ConfigError, match="'data.reorder' applies to full-graph training"):
        load_config(["sampler=saint_rw", "model=saint", "data.reorder=true"])
    assert load_config(["data.reorder=true"]).data.reorder is True


def test_sampled_experiments_compose():
    for name in ("graphsaint_rw_facebook", "graphsaint_node_facebook", "graphsaint_edge_facebook",
                 "sage_neighbor_facebook", "graphsaint_rw_synthetic", "ogbn_products_saint",
                 "ogbn_products_neighbor"):
        cfg = load_config([f"experiment={name}"])
        assert cfg.sampler.name is not None
    assert load_config(["experiment=graphsaint_rw_synthetic"]).data.options.num_nodes >= 1_000_000


def _saint_batch() -> Batch:
    graph = Graph(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3)
    return Batch(graph=graph, n_id=torch.arange(3), e_id=torch.arange(3), x=torch.zeros(3, 2),
                 y=torch.tensor([0, 1, 1]), node_data={"train_mask": torch.tensor([True, False, True])},
                 batch_size=3, node_norm=torch.tensor([0.5, 7.0, 2.0]))


def test_node_norm_weights_the_loss_over_training_nodes():
    batch = _saint_batch()
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 3.0]])
    mask, weight = target_rows(batch, "train")
    assert mask.tolist() == [True, False, True] and weight.tolist() == [0.5, 2.0]
    loss = node_loss(logits[mask], batch.y[mask], weight)
    per_node = F.cross_entropy(logits, batch.y, reduction="none")
    assert loss.item() == pytest.approx(0.5 * per_node[0].item() + 2.0 * per_node[2].item())


def test_neighbor_batches_take_the_seeds_and_full_batches_the_stage_mask():
    graph = Graph(torch.tensor([[1, 2, 3], [0, 0, 1]]), num_nodes=4)
    batch = Batch(graph=graph, n_id=torch.arange(4), e_id=torch.arange(3), x=torch.zeros(4, 2),
                  y=torch.tensor([0, 1, 1, 0]), batch_size=2)
    mask, weight = target_rows(batch, "train")
    assert mask.tolist() == [True, True, False, False] and weight is None
    masks = [torch.tensor(m) for m in ([True, False, False, False], [False, True, False, False],
                                        [False, False, True, True])]
    full = FullGraphBatch(torch.zeros(4, 2), batch.y, graph, *masks)
    assert target_rows(full, "test")[0].tolist() == [False, False, True, True]


def test_paper_weights_average_over_training_in_neighbours():
    # 0 → 2, 1 → 2, 3 → 2 and 2 → 0; node 3 is not a training node.
    graph = Graph(torch.tensor([[0, 1, 3, 2], [2, 2, 2, 0]]), num_nodes=4)
    weight = training_mean_edge_weight(graph, torch.tensor([True, True, True, False]))
    assert weight.tolist() == [0.5, 0.5, 0.0, 1.0]


def test_loader_is_built_on_the_training_device_and_reseeded_per_epoch(tmp_path):
    dataset = load_dataset("synthetic", num_nodes=100, num_features=4, num_classes=3)
    cfg = load_config(["data=synthetic", "sampler=saint_rw", "model=saint", "model.aggr=sum", "sampler.roots=10",
                       "sampler.sample_coverage=2", f"sampler.cache_dir={tmp_path}"])
    dm = build_datamodule(cfg, dataset)
    assert isinstance(dm, SampledDataModule) and dm.loader_args["normalize_edges"]
    loader = dm.train_dataloader()
    assert len(loader) == cfg.sampler.num_steps
    first, again = next(iter(loader)), next(iter(loader))
    assert torch.equal(first.n_id, again.n_id)  # same epoch, same seed
    assert first.x.device.type == "cpu" and first.graph.edge_weight is not None
    dm.setup()
    assert dm.batch.graph.edge_weight is not None  # evaluation graph: 1 / in-degree weights


def test_validation_every_second_epoch(sampled, tmp_path):
    overrides = [*sampled, *SAMPLER_RUNS["neighbor"], "trainer.max_epochs=2", "trainer.check_val_every_n_epoch=2"]
    metrics = train(load_config(overrides), verbose=False)
    with open(tmp_path / "run" / "logs" / "version_0" / "metrics.csv") as f:
        val_epochs = {int(row["epoch"]) for row in csv.DictReader(f) if row.get("val/acc")}
    assert val_epochs == {1} and metrics["best_epoch"] == 1
