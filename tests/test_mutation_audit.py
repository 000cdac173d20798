"""Tests from the second mutation audit (session 22): each kills a mutation that the rest of the suite let
survive. The id names the mutation; the section header names the test file it belongs in."""

from __future__ import annotations

import gzip
import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from graphfuse.checks import is_finite_real
from graphfuse.engine import autograd
from graphfuse.graph import Graph, cluster_labels, process_graph
from graphfuse.graph import norm as reference_norm


def _graph(n=20, e=80, weighted=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w = torch.rand(e, generator=gen) if weighted else None
    return Graph(torch.randint(0, n, (2, e), generator=gen), num_nodes=n, edge_weight=w)


# ---------------------------------------------------------------- tests/engine/test_inference_mode.py
def test_A1_inference_weights_changed_in_place_are_permuted_again():
    """autograd._permuted must not cache an inference tensor's permutation (no version counter to notice a change)."""
    with torch.inference_mode():
        g = _graph(weighted=True)
        autograd._permuted(g, g.edge_weight, "csr")
        g.edge_weight.mul_(2.0)  # in place, unseen by any version counter
        second = autograd._permuted(g, g.edge_weight, "csr")
    assert torch.equal(second, g.edge_weight.index_select(0, g.csr.perm))


# ---------------------------------------------------------------- tests/kernels/test_launchers_cpu.py (engine ops)
def test_A7_edge_softmax_is_stable_for_large_scores():
    g = Graph(torch.tensor([[0, 1, 2], [2, 2, 0]]), num_nodes=3)
    out = autograd.edge_softmax(g, torch.tensor([1000.0, 1000.0, -1000.0]))
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.tensor([0.5, 0.5, 1.0]))


def test_A8_kernel_backends_do_not_claim_per_head_sampled_aggregation():
    g = _graph()
    supports = autograd._supports("gespmm")
    x = torch.randn(g.num_src, 4)
    assert supports("sampled_aggregate", graph=g, x=x, edge_weight=torch.rand(g.num_edges), reduce="sum")
    assert not supports("sampled_aggregate", graph=g, x=x, edge_weight=torch.rand(g.num_edges, 2), reduce="sum")


# ---------------------------------------------------------------- tests/engine/test_edge_sampling.py
def test_C3_use_sampling_is_undone_when_its_block_ends():
    from graphfuse.engine.edge_sampling import EdgeSampling, current_sampling, use_sampling

    with use_sampling(EdgeSampling(8)):
        assert current_sampling() == EdgeSampling(8)
    assert current_sampling() is None
    with pytest.raises(RuntimeError), use_sampling(EdgeSampling(4)):
        raise RuntimeError("boom")
    assert current_sampling() is None


# ---------------------------------------------------------------- tests/graph/test_processing_attention.py
def test_B2_gat_attention_refuses_dropout_one():
    from graphfuse.engine.attention import gat_attention

    g = _graph()
    a = torch.randn(g.num_nodes, 2)
    with pytest.raises(ValueError, match=r"dropout must lie in \[0, 1\)"):
        gat_attention(g, a, a, dropout=1.0, training=True)


# ---------------------------------------------------------------- tests/graph/test_processing.py
def test_D4_process_graph_gcn_without_self_loops_adds_none():
    g = Graph(torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]]), num_nodes=4)
    out = process_graph(g, norm="gcn", backend="reference")
    expected = reference_norm.gcn_norm(g, add_self_loops=False)
    assert out.num_edges == g.num_edges
    assert torch.equal(out.edge_index, expected.edge_index)
    torch.testing.assert_close(out.edge_weight, expected.edge_weight)


# ---------------------------------------------------------------- tests/graph/test_reorder.py
def test_E1_two_colourable_structures_do_not_oscillate():
    """One undirected edge: updating both endpoints at once would swap their labels every pass."""
    g = Graph(torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    labels = cluster_labels(g)
    assert labels[0] == labels[1]


def test_E4_a_quiet_half_pass_does_not_stop_propagation():
    """Even nodes isolated, odd nodes a triangle: the first (even) pass changes nothing, the odd half still must run."""
    g = Graph(torch.tensor([[1, 3, 3, 5, 5, 1], [3, 1, 5, 3, 1, 5]]), num_nodes=6)
    labels = cluster_labels(g)
    assert labels[1] == labels[3] == labels[5]
    assert labels[[0, 2, 4]].tolist() == [0, 2, 4]


# ---------------------------------------------------------------- tests/nn/test_layers.py
def test_G1_gat_without_self_loops_names_the_square_requirement():
    from graphfuse.nn import GATConv

    g = Graph(torch.tensor([[0, 4, 2], [0, 1, 2]]), num_src=5, num_dst=3)
    with pytest.raises(ValueError, match="GATConv: graph must be square"):
        GATConv(4, 3, add_self_loops=False)(torch.randn(5, 4), g)


# ---------------------------------------------------------------- tests/samplers/test_loader.py (Batch)
def _batch():
    from graphfuse.samplers import Batch

    graph = Graph(torch.tensor([[0, 1, 2], [1, 2, 0]]), num_nodes=3, edge_weight=torch.tensor([0.5, 1.0, 2.0]))
    return Batch(graph=graph, n_id=torch.arange(3), e_id=torch.arange(3), x=torch.zeros(3, 2), y=torch.zeros(3),
                 batch=torch.tensor([0, 0, 1]), input_id=torch.tensor([4, 7]), batch_size=2)


def test_I1_batch_to_moves_every_tensor():
    moved = _batch().to("meta")
    for name in ("n_id", "e_id", "x", "y", "batch", "input_id"):
        assert getattr(moved, name).device.type == "meta", name


def test_I2_to_pyg_keeps_edge_weights():
    pytest.importorskip("torch_geometric")
    batch = _batch()
    data = batch.to_pyg()
    assert torch.equal(data.edge_weight, batch.graph.edge_weight)


# ---------------------------------------------------------------- tests/trainers/test_run.py
def test_K1_a_rerun_may_change_logger_settings(tmp_path):
    from graphfuse.trainers.run import _check_rerun

    earlier = {"seed": 0, "model": {"hidden": 8}, "logger": {"wandb": True, "project": "a"}}
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(earlier))
    _check_rerun(tmp_path, {"seed": 0, "model": {"hidden": 8}, "logger": {"wandb": False, "project": "b"}})
    from graphfuse.trainers.config import ConfigError

    with pytest.raises(ConfigError, match="model.hidden=8"):  # the check itself still bites
        _check_rerun(tmp_path, {"seed": 0, "model": {"hidden": 16}, "logger": {"wandb": True, "project": "a"}})


def test_K5_without_a_recorded_best_the_newest_best_file_is_kept(tmp_path):
    from graphfuse.trainers.run import _remove_unrecorded_best

    for epoch in (1, 3):
        (tmp_path / f"best-epoch={epoch:03d}.ckpt").write_text("x")
    saved = {"callbacks": {"ModelCheckpoint{}": {"best_model_path": str(tmp_path / "best-epoch=000.ckpt")}}}
    _remove_unrecorded_best(tmp_path, saved)
    assert [p.name for p in tmp_path.iterdir()] == ["best-epoch=003.ckpt"]


def test_L3_device_batch_moves_again_for_another_device():
    from graphfuse.data import load_dataset
    from graphfuse.trainers.datamodule import FullGraphDataModule

    dm = FullGraphDataModule(load_dataset("synthetic", num_nodes=50, num_features=4, num_classes=3))
    assert dm.device_batch(torch.device("cpu")).device.type == "cpu"
    assert dm.device_batch(torch.device("meta")).device.type == "meta"


# ---------------------------------------------------------------- tests/trainers/test_sampled.py
def test_M1_epoch_seeds_differ_across_runs_and_epochs():
    from graphfuse.trainers.sampled import epoch_seed

    seeds = {epoch_seed(s, e) for s in range(4) for e in range(4)}
    assert len(seeds) == 16
    assert epoch_seed(3, 5) == (3 << 20) + 5


def _synthetic():
    from graphfuse.data import load_dataset

    return load_dataset("synthetic", num_nodes=100, num_features=4, num_classes=3)


def test_M3_paper_norm_trains_on_training_subgraph_weights(tmp_path):
    from graphfuse.trainers.sampled import SampledDataModule, training_mean_edge_weight

    ds = _synthetic()
    dm = SampledDataModule(ds, "saint_node", {"budget": 30}, {"num_steps": 2, "sample_coverage": 2, "norm": "paper"},
                           mean_weights=True, cache_dir=tmp_path)
    loader = dm.build_loader(torch.device("cpu"))
    graph = Graph(ds.edge_index, num_nodes=ds.num_nodes)
    assert torch.equal(loader.graph.edge_weight, training_mean_edge_weight(graph, ds.train_mask))


def test_M4_neighbour_batches_refuse_mean_weights():
    from graphfuse.trainers.sampled import SampledDataModule

    with pytest.raises(ValueError, match="mean_weights does not apply to neighbour batches"):
        SampledDataModule(_synthetic(), "neighbor", loader_args={"num_neighbors": [2]}, mean_weights=True)


# ---------------------------------------------------------------- tests/trainers/test_config.py / build
def test_N1_model_backend_reaches_the_layers():
    from graphfuse.trainers.build import build_model
    from graphfuse.trainers.config import load_config

    for name in ("gcn", "sage", "gat", "saint"):
        cfg = load_config(["data=synthetic", f"model={name}", "model.backend=reference"])
        model = build_model(cfg.model, 4, 3)
        assert {conv.backend for conv in model.convs} == {"reference"}, name


def test_N3_drop_last_refuses_a_batch_one_larger_than_the_training_set():
    from graphfuse.trainers.build import build_datamodule
    from graphfuse.trainers.config import ConfigError, load_config

    ds = _synthetic()
    n = int(ds.train_mask.sum())
    base = ["data=synthetic", "model=sage", "sampler=neighbor", "sampler.num_neighbors=[2,2]", "sampler.drop_last=true"]
    build_datamodule(load_config([*base, f"sampler.batch_size={n}"]), ds)
    with pytest.raises(ConfigError, match="leaves no training batch"):
        build_datamodule(load_config([*base, f"sampler.batch_size={n + 1}"]), ds)


def test_N4_no_edge_normalisation_without_coverage(tmp_path):
    from graphfuse.trainers.build import build_datamodule
    from graphfuse.trainers.config import load_config

    cfg = load_config(["data=synthetic", "model=gcn", "sampler=saint_rw", "sampler.roots=10",
                       "sampler.sample_coverage=0", f"sampler.cache_dir={tmp_path}"])
    assert cfg.sampler.aggr_norm  # the default
    dm = build_datamodule(cfg, _synthetic())
    assert dm.loader_args["normalize_edges"] is False
    dm.build_loader(torch.device("cpu"))  # raised: normalize_edges needs sample_coverage > 0


# ---------------------------------------------------------------- tests/data/test_ogbn.py
@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_R1_unlabelled_ogb_nodes_get_minus_one(tmp_path, monkeypatch):
    import builtins

    from graphfuse.data import load_dataset, ogbn

    monkeypatch.setattr(ogbn, "_download_archive", lambda *a: (_ for _ in ()).throw(OSError("offline")))
    monkeypatch.setattr(builtins, "input", lambda prompt="": (_ for _ in ()).throw(AssertionError(prompt)))
    rng = np.random.default_rng(0)
    n, e, f = 30, 60, 5
    folder = tmp_path / "ogb" / "ogbn_arxiv"

    def write(path, rows):
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt") as fh:
            fh.writelines(",".join(map(str, np.atleast_1d(r))) + "\n" for r in rows)

    labels = rng.integers(0, 40, (n, 1)).astype(float)
    labels[[3, 7]] = np.nan
    write(folder / "raw" / "edge.csv.gz", rng.integers(0, n, (e, 2)))
    write(folder / "raw" / "node-feat.csv.gz", rng.standard_normal((n, f)).round(3))
    write(folder / "raw" / "node-label.csv.gz", labels)
    write(folder / "raw" / "node_year.csv.gz", rng.integers(2000, 2020, (n, 1)))
    write(folder / "raw" / "num-node-list.csv.gz", [[n]])
    write(folder / "raw" / "num-edge-list.csv.gz", [[e]])
    perm = np.array([i for i in range(n) if i not in (3, 7)])
    for name, part in (("train", perm[:16]), ("valid", perm[16:22]), ("test", perm[22:])):
        write(folder / "split" / "time" / f"{name}.csv.gz", part[:, None])
    (folder / "RELEASE_v1.txt").write_text("")
    ds = load_dataset("ogbn-arxiv", tmp_path)
    assert ds.y.dtype == torch.int64
    assert ds.y[[3, 7]].tolist() == [-1, -1]
    assert (ds.y[torch.from_numpy(perm)] >= 0).all()


# ---------------------------------------------------------------- tests/data/test_registry.py
def _tiny(name):
    from graphfuse.data import NodeDataset

    return NodeDataset(name=name, x=torch.ones(4, 3), y=torch.tensor([0, 1, 0, 1]),
                       edge_index=torch.tensor([[0, 1], [1, 2]]), train_mask=torch.tensor([True, True, False, False]),
                       val_mask=torch.tensor([False, False, True, False]),
                       test_mask=torch.tensor([False, False, False, True]), num_classes=2)


def test_S1_the_longest_matching_prefix_wins(monkeypatch):
    from graphfuse.data import registry

    monkeypatch.setattr(registry, "DATASETS", dict(registry.DATASETS))

    def short(name, root):
        return _tiny(name)

    def long(name, root):
        return _tiny(name)

    registry.register_dataset("fam-*")(short)
    registry.register_dataset("fam-x-*")(long)
    assert registry.resolve_loader("fam-x-1") is long
    assert registry.resolve_loader("fam-y") is short


def test_S2_a_bare_prefix_is_no_dataset_name(monkeypatch):
    from graphfuse.data import registry

    monkeypatch.setattr(registry, "DATASETS", dict(registry.DATASETS))
    registry.register_dataset("fam-*")(lambda name, root: _tiny(name))
    with pytest.raises(ValueError, match="unknown dataset name 'fam-'"):
        registry.resolve_loader("fam-")


def test_S3_an_empty_root_means_the_default_root(monkeypatch, tmp_path):
    from graphfuse.data import registry

    monkeypatch.setattr(registry, "DATASETS", dict(registry.DATASETS))
    monkeypatch.setenv("GRAPHFUSE_DATA_ROOT", str(tmp_path / "data"))
    seen = {}

    def toy(name, root):
        seen["root"] = root
        return _tiny(name)

    registry.register_dataset("toy")(toy)
    registry.load_dataset("toy", "")
    assert seen["root"] == tmp_path / "data"


# ---------------------------------------------------------------- framework checks (tests/graph/test_processing.py)
def test_T2_minus_infinity_is_not_a_finite_real():
    assert not is_finite_real(-math.inf)
    assert not is_finite_real(np.float64("-inf"))
    g = Graph(torch.tensor([[0, 1], [1, 0]]), num_nodes=2)
    with pytest.raises(ValueError, match="fill_value must be a finite real number"):
        process_graph(g, self_loops=True, fill_value=-math.inf)


# ---------------------------------------------------------------- tests/kernels/test_launchers_cpu.py
def test_U2_gas_self_loops_need_num_dst_rows_of_x():
    from graphfuse.kernels import gas

    src = dst = torch.tensor([0, 1])
    with pytest.raises(ValueError, match="self loops need x with at least num_dst=3 rows; got 2"):
        gas.gas_forward(src, dst, torch.randn(2, 4), num_dst=3, self_loops=True)


def test_U9_graph_processing_refuses_bipartite_gcn():
    from graphfuse.kernels import graph_processing

    with pytest.raises(ValueError, match="need a square graph"):
        graph_processing.process(torch.tensor([[0, 1], [1, 0]]), 3, 2, norm="gcn")


def test_U10_gar_refuses_an_empty_rowptr():
    from graphfuse.kernels import gar

    with pytest.raises(ValueError, match="rowptr must have at least one element"):
        gar.gar_forward(torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.int32), torch.randn(2, 4))
