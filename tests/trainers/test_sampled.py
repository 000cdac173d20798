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
from graphfuse.trainers.sampled import SampledDataModule, epoch_seed, training_mean_edge_weight

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
    # the same bias without GraphSAINT's aggregation normalisation (it was accepted)
    for off in ("sampler.aggr_norm=false", "sampler.sample_coverage=0"):
        with pytest.raises(ConfigError, match="needs GraphSAINT's aggregation normalisation"):
            load_config(["sampler=saint_node", "model=saint", "model.aggr=sum", off])
    assert load_config(["sampler=saint_node", "model=saint", "model.aggr=mean", "sampler.aggr_norm=false"])


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


def test_a_saint_cache_dir_inside_the_mirror_is_a_config_error(tmp_path, monkeypatch):
    """sampler.cache_dir inside $GRAPHFUSE_DATA_MIRROR (read-only) is refused when the data module is built, before
    the run directory is touched; the neighbour sampler, which caches nothing, does not look at it."""
    monkeypatch.setenv("GRAPHFUSE_DATA_MIRROR", str(tmp_path))
    dataset = load_dataset("synthetic", tmp_path.parent / "data", num_nodes=100, num_features=4, num_classes=3)
    cfg = load_config(["data=synthetic", "sampler=saint_rw", "model=saint", f"sampler.cache_dir={tmp_path / 'norm'}"])
    with pytest.raises(ConfigError, match=r"sampler.cache_dir=.* lies inside \$GRAPHFUSE_DATA_MIRROR"):
        build_datamodule(cfg, dataset)
    cfg = load_config(["data=synthetic", "sampler=neighbor", f"sampler.cache_dir={tmp_path / 'norm'}"])
    assert isinstance(build_datamodule(cfg, dataset), SampledDataModule)
    assert not (tmp_path / "norm").exists()


def test_neighbour_hops_other_than_the_layers_are_warned_about(caplog):
    """Review: num_neighbors=[15, 10, 5] with 2 layers (wasted hops) or [10] with 2 (a cut neighbourhood) passed
    without a word."""
    import logging

    dataset = load_dataset("synthetic", num_nodes=100, num_features=4, num_classes=3)
    for hops, message in (("[5,5]", None), ("[5,5,5]", "no layer reaches them"), ("[5]", "cut short")):
        cfg = load_config(["data=synthetic", "sampler=neighbor", f"sampler.num_neighbors={hops}"])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="graphfuse.trainers.build"):
            build_datamodule(cfg, dataset)
        assert (message in caplog.text and "model.num_layers=2" in caplog.text) if message else caplog.text == ""


def test_loader_is_built_on_the_training_device_and_reseeded_per_epoch(tmp_path):
    dataset = load_dataset("synthetic", num_nodes=100, num_features=4, num_classes=3)
    cfg = load_config(["data=synthetic", "sampler=saint_rw", "model=saint", "model.aggr=sum", "sampler.roots=10",
                       "sampler.sample_coverage=2", f"sampler.cache_dir={tmp_path}"])
    dm = build_datamodule(cfg, dataset)
    assert isinstance(dm, SampledDataModule) and dm.loader_args["normalize_edges"]
    loader = dm.train_dataloader()
    assert len(loader) == cfg.sampler.num_steps
    first, second = next(iter(loader)), next(iter(loader))
    assert not torch.equal(first.n_id, second.n_id)  # without a trainer each pass is the next epoch (all were 0)
    assert torch.equal(next(iter(build_datamodule(cfg, dataset).train_dataloader())).n_id, first.n_id)  # same seed
    assert first.x.device.type == "cpu" and first.graph.edge_weight is not None
    dm.setup()
    assert dm.batch.graph.edge_weight is not None  # evaluation graph: 1 / in-degree weights


def test_validation_every_second_epoch(sampled, tmp_path):
    overrides = [*sampled, *SAMPLER_RUNS["neighbor"], "trainer.max_epochs=2", "trainer.check_val_every_n_epoch=2"]
    metrics = train(load_config(overrides), verbose=False)
    with open(tmp_path / "run" / "logs" / "version_0" / "metrics.csv") as f:
        val_epochs = {int(row["epoch"]) for row in csv.DictReader(f) if row.get("val/acc")}
    assert val_epochs == {1} and metrics["best_epoch"] == 1


def _fit_one_epoch(batches, **module_args):
    """Run one training epoch of a frozen (lr = 0) linear classifier over ``batches``; the epoch's logged metrics."""
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    from graphfuse.trainers.module import NodeClassifier

    model = torch.nn.Linear(2, 2)
    with torch.no_grad():
        model.weight.copy_(torch.eye(2))
        model.bias.zero_()
    module = NodeClassifier(model, num_classes=2, lr=0.0, weight_decay=0.0, **module_args)
    module.forward = lambda x, graph: module.model(x)
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0)
    trainer.fit(module, train_dataloaders=DataLoader(batches, batch_size=None, collate_fn=lambda b: b))
    return module, {k: float(v) for k, v in trainer.callback_metrics.items()}


def _subgraph_batch(num_nodes, train, node_norm=None, x=None) -> Batch:
    """A batch of ``num_nodes`` edgeless nodes with labels 0, 1, 0, ... (the logits are the features)."""
    x = torch.linspace(-1, 1, 2 * num_nodes).view(num_nodes, 2) if x is None else torch.tensor(x)
    graph = Graph(torch.empty(2, 0, dtype=torch.long), num_nodes=num_nodes)
    return Batch(graph=graph, n_id=torch.arange(num_nodes), e_id=torch.empty(0, dtype=torch.long), x=x,
                 y=torch.arange(num_nodes) % 2, node_data={"train_mask": torch.tensor(train)},
                 batch_size=num_nodes, node_norm=node_norm)


def test_epoch_metrics_weight_each_batch_by_the_rows_it_scored():
    # Two GraphSAINT-like batches: 6 nodes of which 1 is a training node, and 2 nodes, both training nodes.
    # A batch's mean loss and ogb accuracy count once per scored row (1 and 2), not per subgraph node (6 and 2).
    # The first batch's training row is right (label 0, logits [1, 0]), the second's rows half right.
    first = [[0.0, 0.0]] * 2 + [[1.0, 0.0]] + [[0.0, 0.0]] * 3
    batches = [_subgraph_batch(6, [False, False, True, False, False, False], x=first),
               _subgraph_batch(2, [True, True], x=[[0.0, 2.0], [0.0, 2.0]])]
    module, logged = _fit_one_epoch(batches, ogb_name="ogbn-products")
    losses, hits, rows = [], [], []
    with torch.no_grad():
        for batch in batches:
            mask, _ = target_rows(batch, "train")
            logits = module.model(batch.x[mask])
            losses.append(F.cross_entropy(logits, batch.y[mask]).item())
            hits.append((logits.argmax(-1) == batch.y[mask]).double().mean().item())
            rows.append(int(mask.sum()))
    expected_loss = sum(r * v for r, v in zip(rows, losses)) / sum(rows)
    expected_acc = sum(r * v for r, v in zip(rows, hits)) / sum(rows)
    assert hits == [1.0, 0.5] and losses[0] != pytest.approx(losses[1])  # the weighting matters
    assert logged["train/loss"] == pytest.approx(expected_loss, rel=1e-5)
    assert logged["train/ogb_acc"] == pytest.approx(expected_acc, rel=1e-5)
    assert logged["train/acc"] == pytest.approx(expected_acc, rel=1e-5)  # torchmetrics counts rows itself


def test_epoch_loss_of_normalised_batches_is_the_mean_of_their_estimates():
    # A node_norm-weighted batch loss estimates the whole graph's loss by itself: each batch counts once.
    batches = [_subgraph_batch(6, [False, False, True, False, False, True], node_norm=torch.full((6,), 0.5)),
               _subgraph_batch(2, [True, False], node_norm=torch.full((2,), 2.0))]
    module, logged = _fit_one_epoch(batches)
    with torch.no_grad():
        estimates = []
        for batch in batches:
            mask, weight = target_rows(batch, "train")
            estimates.append(node_loss(module.model(batch.x[mask]), batch.y[mask], weight).item())
    assert estimates[0] != pytest.approx(estimates[1])
    assert logged["train/loss"] == pytest.approx(sum(estimates) / 2, rel=1e-5)


def test_a_batch_without_target_rows_is_skipped():
    # A GraphSAINT subgraph without training nodes and without node_norm: its mean loss would be NaN, which
    # poisoned the epoch's train/loss (NaN x 0 rows is still NaN) and stepped Adam on nothing. It is skipped.
    batches = [_subgraph_batch(3, [False, False, False]),
               _subgraph_batch(2, [True, True], x=[[0.0, 2.0], [0.0, 2.0]])]
    module, logged = _fit_one_epoch(batches)
    with torch.no_grad():
        mask, _ = target_rows(batches[1], "train")
        expected = F.cross_entropy(module.model(batches[1].x[mask]), batches[1].y[mask]).item()
    assert logged["train/loss"] == pytest.approx(expected, rel=1e-5)


def test_a_normalised_batch_without_target_rows_counts_as_a_zero_estimate():
    """With node_norm (GraphSAINT's default normalisation) an empty batch reached the metrics and failed inside
    torchmetrics (review: budget 30 on Cora, after a fresh run had cleared the earlier one). It is not trained
    on, and its loss estimate, 0, counts once in the epoch mean as the other batches' estimates do."""
    batches = [_subgraph_batch(3, [False, False, False], node_norm=torch.full((3,), 0.5)),
               _subgraph_batch(2, [True, True], node_norm=torch.full((2,), 2.0), x=[[0.0, 2.0], [0.0, 2.0]])]
    module, logged = _fit_one_epoch(batches, ogb_name="ogbn-products")
    with torch.no_grad():
        mask, weight = target_rows(batches[1], "train")
        estimate = node_loss(module.model(batches[1].x[mask]), batches[1].y[mask], weight).item()
    assert estimate > 0 and logged["train/loss"] == pytest.approx(estimate / 2, rel=1e-5)
    assert logged["train/acc"] == pytest.approx(0.5) and logged["train/ogb_acc"] == pytest.approx(0.5)


def test_neighbor_batches_larger_than_the_training_set_with_drop_last_are_refused(sampled, tmp_path):
    # drop_last=true with batch_size above the number of training nodes gave epochs without a training batch:
    # no validation, no best checkpoint, and trainer.test(ckpt_path="best") raised a ValueError traceback
    overrides = [*sampled, *SAMPLER_RUNS["neighbor"], "sampler.batch_size=10000", "sampler.drop_last=true"]
    with pytest.raises(ConfigError, match="sampler.batch_size=10000.*training nodes"):
        train(load_config([*overrides, "trainer.max_epochs=1"]), verbose=False)


def test_any_torch_seed_draws_batches_and_bad_seeds_are_refused_up_front():
    """Found by review: the epoch seed (seed << 20) + epoch overflowed torch's range from seed 2**44 on, failing
    inside fit at the first batch; a str seed was taken."""
    dataset = load_dataset("synthetic", num_nodes=100, num_features=4, num_classes=3)
    for seed in (2**44, 2**64 - 1):
        dm = SampledDataModule(dataset, "saint_rw", {"roots": 10, "walk_length": 2}, {"num_steps": 2}, seed=seed)
        assert next(iter(dm.train_dataloader())).n_id.numel() > 0
    with pytest.raises(ValueError, match="SampledDataModule: seed must be an int"):
        SampledDataModule(dataset, "saint_rw", {"roots": 10, "walk_length": 2}, seed="1")


def test_epoch_seeds_differ_across_runs_and_epochs():
    seeds = {epoch_seed(s, e) for s in range(4) for e in range(4)}
    assert len(seeds) == 16
    assert epoch_seed(3, 5) == (3 << 20) + 5


def _synthetic():
    return load_dataset("synthetic", num_nodes=100, num_features=4, num_classes=3)


def test_paper_norm_trains_on_training_subgraph_weights(tmp_path):
    ds = _synthetic()
    dm = SampledDataModule(ds, "saint_node", {"budget": 30}, {"num_steps": 2, "sample_coverage": 2, "norm": "paper"},
                           mean_weights=True, cache_dir=tmp_path)
    loader = dm.build_loader(torch.device("cpu"))
    graph = Graph(ds.edge_index, num_nodes=ds.num_nodes)
    assert torch.equal(loader.graph.edge_weight, training_mean_edge_weight(graph, ds.train_mask))


@pytest.mark.parametrize("sampler, sampler_args, loader_args, mean_weights", [
    ("neighbor", {}, {"num_neighbors": [2]}, False),
    ("saint_node", {"budget": 30}, {"num_steps": 2}, False),
    ("saint_node", {"budget": 30}, {"num_steps": 2}, True),
    ("saint_node", {"budget": 30}, {"num_steps": 2, "sample_coverage": 2, "norm": "paper"}, True),
])
def test_the_loader_samples_from_the_evaluation_graph(sampler, sampler_args, loader_args, mean_weights, tmp_path):
    """One copy of the edges and their formats on the training device (the loader had its own Graph: a second
    device copy of edge_index and of every format built on it, ~41 bytes per edge); paper weights, which
    differ, make a Graph over the same edge_index."""
    dm = SampledDataModule(_synthetic(), sampler, sampler_args, loader_args, mean_weights=mean_weights,
                           cache_dir=tmp_path)
    loader = dm.build_loader(torch.device("cpu"))
    batch = dm.device_batch(torch.device("cpu"))
    if loader_args.get("norm") == "paper":
        assert loader.graph is not batch.graph and loader.graph.edge_index is batch.graph.edge_index
    else:
        assert loader.graph is batch.graph


def test_neighbour_batches_refuse_mean_weights():
    with pytest.raises(ValueError, match="mean_weights does not apply to neighbour batches"):
        SampledDataModule(_synthetic(), "neighbor", loader_args={"num_neighbors": [2]}, mean_weights=True)


def test_drop_last_refuses_a_batch_one_larger_than_the_training_set():
    ds = _synthetic()
    n = int(ds.train_mask.sum())
    base = ["data=synthetic", "model=sage", "sampler=neighbor", "sampler.num_neighbors=[2,2]", "sampler.drop_last=true"]
    build_datamodule(load_config([*base, f"sampler.batch_size={n}"]), ds)
    with pytest.raises(ConfigError, match="leaves no training batch"):
        build_datamodule(load_config([*base, f"sampler.batch_size={n + 1}"]), ds)


def test_no_edge_normalisation_without_coverage(tmp_path):
    cfg = load_config(["data=synthetic", "model=gcn", "sampler=saint_rw", "sampler.roots=10",
                       "sampler.sample_coverage=0", f"sampler.cache_dir={tmp_path}"])
    assert cfg.sampler.aggr_norm  # the default
    dm = build_datamodule(cfg, _synthetic())
    assert dm.loader_args["normalize_edges"] is False
    dm.build_loader(torch.device("cpu"))  # raised: normalize_edges needs sample_coverage > 0


def test_the_runs_seed_draws_the_training_batches():
    """seed=1 and seed=0 train on different batches; the same seed on the same ones."""
    ds = _synthetic()

    def batches(seed):
        cfg = load_config(["data=synthetic", "model=sage", "sampler=neighbor", "sampler.num_neighbors=[2,2]",
                           "sampler.batch_size=8", f"seed={seed}"])
        return [b.n_id for b in build_datamodule(cfg, ds).train_dataloader()]

    zero, one = batches(0), batches(1)
    assert len(zero) == len(one) > 1
    assert all(torch.equal(a, b) for a, b in zip(zero, batches(0)))
    assert not all(torch.equal(a, b) for a, b in zip(zero, one))


def test_the_normalisation_is_cached_under_the_data_root_by_default(tmp_path, monkeypatch):
    """sampler.cache_dir null: <data.root>/saint_norm (config docstring), not the default data root."""
    monkeypatch.setenv("GRAPHFUSE_DATA_ROOT", str(tmp_path / "default_root"))
    cfg = load_config(["data=synthetic", "sampler=saint_rw", "model=saint", "model.aggr=sum", "sampler.roots=10",
                       "sampler.sample_coverage=1", f"data.root={tmp_path / 'data'}"])
    build_datamodule(cfg, _synthetic()).train_dataloader()  # pre-samples and caches the coefficients
    assert len(list((tmp_path / "data" / "saint_norm").iterdir())) == 1
    assert not (tmp_path / "default_root").exists()
