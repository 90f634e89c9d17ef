"""The cost-model dataset's labels: re-timed in fresh processes, resumably, and the ceiling measured the same way."""

from __future__ import annotations

import json
import os
import statistics
import types

import pytest

from autosearch.cost_models.features import labelled_trials
from autosearch.records import read_log
from tests.conftest import small_conv_onnx


def test_select_tasks_spread_takes_the_extremes_and_between():
    from experiments.make_dataset import select_tasks

    tasks = [types.SimpleNamespace(index=i, name=f"fused_conv2d{i}" if i != 3 else "fused_add", flops=float(10 - i))
             for i in range(10)]
    picked = select_tasks(tasks, "spread:3")
    assert [t.index for t in picked] == [9, 5, 0]  # cheapest, middle and costliest conv (in FLOPs order)
    assert [t.index for t in select_tasks(tasks, "2")] == [9, 8]
    assert len(select_tasks(tasks, "spread:50")) == 9  # no more than the model's conv tasks


def test_make_dataset_relabels_resumably_and_the_noise_ceiling_uses_its_settings(tmp_path):
    """End to end on a small conv model's one conv task: trials, their re-times (round 1), a resume that adds round 2
    only, labels from both rounds, and measurement_noise repeating the log's re-timing settings. (The small conv,
    not a tiny-YOLOv2 layer: importing tiny-YOLOv2, twice, was most of this test's time, and nothing here depends
    on which model the conv comes from.)"""
    from experiments import label_rounds, make_dataset, measurement_noise, timing_noise_sources

    model = str(tmp_path / "small_conv.onnx")
    small_conv_onnx(model)
    out = str(tmp_path / "dataset.jsonl")
    common = ["--model", model, "--tasks", "1", "--per-task", "3", "--batch", "3", "--out", out,
              "--retime-repeat", "2", "--retime-min-repeat-ms", "1"]
    assert make_dataset.main([*common, "--retime-rounds", "1"]) == 0
    first = read_log(out)
    [header] = first.tasks.values()
    assert header["models"] == [model]
    trials = [r for r in first.trials() if r.ok]
    assert len(first.trials()) == 3 and trials
    assert sorted((r.round, r.config) for r in first.records if r.kind == "retime") == sorted(
        (1, r.config) for r in trials)
    assert first.runs[-1]["retime"]["rounds"] == 1 and first.runs[-1]["retime"]["evaluator"]["repeat"] == 2

    assert make_dataset.main([*common, "--retime-rounds", "2", "--resume"]) == 0
    second = read_log(out)
    assert len(second.trials()) == 3  # nothing measured twice
    retimes = [r for r in second.records if r.kind == "retime"]
    assert sorted((r.round, r.config) for r in retimes) == sorted(
        [(1, r.config) for r in trials] + [(2, r.config) for r in trials])
    labels = dict((r.config, latency) for r, latency in labelled_trials(second))
    for config, latency in labels.items():
        assert latency == pytest.approx(statistics.median(r.latency for r in retimes if r.config == config))
    # every re-time loaded the kernel its trial built (OUT.builds), in a fresh measuring process: none was built again
    assert os.path.isdir(out + ".builds") and all(r.result.build_secs == 0.0 for r in retimes)

    noise = str(tmp_path / "noise")
    assert measurement_noise.main(["--log", out, "--per-task", "2", "--out", noise]) == 0
    with open(f"{noise}.json") as fh:
        summary = json.load(fh)
    assert summary["rounds"] == 2 and summary["evaluator"]["repeat"] == 2  # the labels' own settings
    [row] = summary["rows"]
    assert row["n"] == 2 and 0.0 <= row["pairwise"] <= 1.0
    assert len([r for r in read_log(f"{noise}.jsonl").records if r.kind == "retime"]) == 2 * 2

    # where the noise comes from: the same 2 kernels over 2 passes in one measuring process, then in 2 fresh ones
    sources = str(tmp_path / "sources")
    assert timing_noise_sources.main(["--log", out, "--tasks", "1", "--per-task", "2", "--passes", "2",
                                      "--out", sources]) == 0
    with open(f"{sources}.json") as fh:
        rows = json.load(fh)["rows"]
    assert rows["same process"]["kernels"] == rows["fresh process"]["kernels"] == 2
    timed = [r for r in read_log(f"{sources}.jsonl").records if r.kind == "retime"]
    assert sorted(r.round for r in timed) == [1, 1, 2, 2, 101, 101, 102, 102]
    workers = {n: {r.result.worker for r in timed if r.round == n} for n in (1, 2, 101, 102)}
    assert workers[1] == workers[2] and len(workers[1]) == 1  # one process for both same-process passes
    assert len(workers[101] | workers[102]) == 2 and not (workers[101] | workers[102]) & workers[1]
    assert all(r.result.build_secs == 0.0 for r in timed)  # every kernel loaded from the dataset's build cache

    # the ceiling as a function of rounds: 2 kernels in 2 fresh-process rounds (1-round labels), resumably, of a
    # dataset measured elsewhere (its records name another CPU; the kernels load from its build cache)
    elsewhere = str(tmp_path / "elsewhere.jsonl")
    with open(out) as src, open(elsewhere, "w") as dst:
        dst.write(src.read().replace('"mcpu":"', '"mcpu":"zen9-'))
    os.symlink(out + ".builds", elsewhere + ".builds")
    rounds = str(tmp_path / "rounds")
    argv = ["--log", elsewhere, "--tasks", "1", "--per-task", "2", "--max-rounds", "1", "--project-to", "2",
            "--out", rounds]
    assert label_rounds.main([*argv, "--max-minutes", "0"]) == 0  # the deadline passed at once: nothing timed
    assert not [r for r in read_log(f"{rounds}.jsonl").records if r.kind == "retime"]
    assert not os.path.exists(f"{rounds}.json")
    assert label_rounds.main(argv) == 0
    timed = [r for r in read_log(f"{rounds}.jsonl").records if r.kind == "retime"]
    assert sorted(r.round for r in timed) == [1, 1, 2, 2] and all(r.result.build_secs == 0.0 for r in timed)
    assert {r.target["mcpu"] for r in timed} == {r.target["mcpu"] for r in trials}  # this host's, not the log's
    with open(f"{rounds}.json") as fh:
        summary = json.load(fh)
    table = summary["table"]
    assert summary["machine"]["mcpu"] == trials[0].target["mcpu"]
    assert set(table) == {"1", "2"} and table["1"]["measured"] and not table["2"]["measured"]
    assert 0.0 <= table["1"]["measured"]["pairwise"] <= 1.0 and os.path.exists(f"{rounds}.png")
    assert label_rounds.main(argv) == 0  # resumed: nothing left to time
    assert len([r for r in read_log(f"{rounds}.jsonl").records if r.kind == "retime"]) == 4
    with open(f"{rounds}.jsonl") as fh:
        text = fh.read()
    with open(f"{rounds}.jsonl", "w") as fh:  # as if the first rounds had run on another machine
        fh.write(text.replace('"machine":{"cpu_model":"', '"machine":{"cpu_model":"Other '))
    with pytest.raises(SystemExit) as refused:
        label_rounds.main(argv)
    assert refused.value.code == 2
    assert len([r for r in read_log(f"{rounds}.jsonl").records if r.kind == "retime"]) == 4


def test_label_rounds_projection_matches_what_it_measures():
    """Kernels with known levels, a per-round offset and Gaussian noise: the model's projected ceiling at R rounds
    is what the R-round labels measure, and more rounds raise both."""
    import numpy as np

    from experiments.label_rounds import measured, projected, split_pairs

    assert len(split_pairs(4, 1)) == 12 and len(split_pairs(4, 2)) == 6
    assert all(not set(a) & set(b) for a, b in split_pairs(6, 3))
    rng = np.random.default_rng(0)
    levels, offsets = rng.normal(0, 0.3, 60), rng.normal(0, 0.05, 6)
    timings = np.exp(levels[:, None] + offsets[None, :] + rng.normal(0, 0.08, (60, 6)))
    got, model = measured(timings, 3), projected(timings, 6, rng=rng)
    for r in (1, 2, 3):
        assert abs(got[r]["pairwise"] - model[r]["pairwise"]) < 0.02, (r, got[r], model[r])
    assert got[1]["pairwise"] < got[2]["pairwise"] and model[2]["pairwise"] < model[6]["pairwise"]
