"""``train-model --measure``: a dataset measured on this machine, trained on, used by ``run``; continued, never
measuring a config twice; bad input in one line."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest

from tests.conftest import run_cli, run_cli_here, small_conv_onnx, two_wide_convs_onnx


def _trials(path: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for line in open(path):
        obj = json.loads(line)
        if obj["kind"] == "trial":
            out[obj["task"]["key"]].append(obj)
    return out


def test_measure_train_continue_and_guide_a_run(tmp_path, capfd) -> None:
    model = str(tmp_path / "conv.onnx")
    small_conv_onnx(model)
    out = str(tmp_path / "mine")
    args = ("train-model", "--measure", "--model", model, "--tasks-per-layout", "1", "--out", out, "--folds", "2")
    proc = run_cli(*args, "--per-task", "3", "--minutes", "5")  # a real process, as a user runs it; then in this one
    assert proc.returncode == 0, proc.stderr[-2000:]
    dataset = os.path.join(out, "dataset.jsonl")
    first = _trials(dataset)
    # one conv task per fp32 layout a run tunes here (NHWC alone where the bf16 unit doubles the fp32 rate), and the
    # bf16 one where this CPU has a bf16 unit; 3 configs each; the first line says which lowerings
    from autosearch.frontend.target import parse_target
    from autosearch.search.dataset import run_layouts

    unit, layouts = _host_bf16_unit(), run_layouts(model, parse_target(None))
    assert len(first) == len(layouts) + bool(unit) and all(len(t) == 3 for t in first.values())
    lowerings = ", ".join([f"fp32 {layout}" for layout in layouts] + (["bf16 NHWC"] if unit else []))
    assert f"({lowerings}: its convolutions" in " ".join(proc.stdout.split())
    assert os.path.exists(os.path.join(out, "manifest.json")) and "use it: python -m autosearch run" in proc.stdout

    proc = run_cli_here(capfd, *args, "--per-task", "6", "--minutes", "5", "--force")  # more configs: goes on
    assert proc.returncode == 0, proc.stderr[-2000:]
    second = _trials(dataset)
    assert set(second) == set(first) and all(len(t) == 6 for t in second.values())
    for key, trials in second.items():  # the first call's trials kept, none measured again
        assert trials[:3] == first[key]
        configs = [json.dumps(t["config"], sort_keys=True) for t in trials]
        assert len(set(configs)) == len(configs)
    runs = [json.loads(line)["run"] for line in open(dataset) if '"kind":"run"' in line]
    assert [r["resumed"] for r in runs] == [False, True]
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert manifest["records"] == sum(1 for t in second.values() for r in t if r["result"]["status"] == "ok")
    assert manifest["tensor_units"] == ([unit] if unit else [])  # the model guides this CPU's bf16 tasks too

    log = str(tmp_path / "run.jsonl")
    proc = run_cli_here(capfd, "run", "--strategy", "optuna", "--model", model, "--layout", "NHWC", "--trials", "4",
                        "--batch", "2", "--cost-model", out, "--log", log, "--finalist-rounds", "0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    header = json.loads(open(log).readline())["run"]
    assert header["cost_model"] == out and out in header["guided_by"]
    assert "run unguided" not in proc.stdout


def test_measure_for_another_target_than_the_host(tmp_path, capfd) -> None:
    """``--target``: the dataset is measured for that target, not the host's CPU (as a CPU with AMX measures the
    AVX512-BF16 dot product's schedules with a target of its features less AMX); one without a bf16 unit has no
    bf16 tasks, whatever the host has."""
    model = str(tmp_path / "conv.onnx")
    small_conv_onnx(model)
    out = str(tmp_path / "generic")
    target = {"kind": "llvm", "mcpu": "x86-64", "num-cores": 1}  # runs on any x86-64 CPU; no bf16 unit
    proc = run_cli_here(capfd, "train-model", "--measure", "--model", model, "--tasks-per-layout", "1",
                        "--per-task", "2", "--minutes", "5", "--folds", "2", "--out", out,
                        "--target", json.dumps(target))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "measuring a dataset for {" in proc.stdout
    trials = _trials(os.path.join(out, "dataset.jsonl"))
    assert len(trials) == 2 and all(len(t) == 2 for t in trials.values())  # one fp32 conv task a layout
    assert {(t["target"]["mcpu"], t["target"]["num-cores"]) for ts in trials.values() for t in ts} == {("x86-64", 1)}
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert manifest["tensor_units"] == [] and manifest["target"]["mcpu"] == "x86-64"


def test_measure_through_a_plug_in_runner(tmp_path, capfd) -> None:
    """``--runner``: the dataset is measured by a registered runner, here the example package's (a runner of a board
    would measure it there), its option checked and passed."""
    from tests.conftest import example_plug_in

    example_plug_in("autosearch-device-runner")
    model = str(tmp_path / "conv.onnx")
    small_conv_onnx(model)
    out = str(tmp_path / "device")
    target = {"kind": "llvm", "mcpu": "x86-64", "num-cores": 1}
    proc = run_cli_here(capfd, "train-model", "--measure", "--model", model, "--tasks-per-layout", "1",
                        "--per-task", "2", "--minutes", "5", "--folds", "2", "--out", out, "--target",
                        json.dumps(target), "--runner", "device", "--runner-option", "threads=1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "through the runner 'device'" in proc.stdout
    trials = [t for ts in _trials(os.path.join(out, "dataset.jsonl")).values() for t in ts]
    assert len(trials) == 4 and {t["worker"].split(":")[-2] for t in trials} == {"device"}


def _host_bf16_unit() -> str | None:
    from autosearch.frontend.target import parse_target
    from autosearch.tensor_units.cpu import bf16_unit

    return bf16_unit(parse_target(None))


def test_the_dataset_measures_the_bf16_tasks_where_the_cpu_has_a_unit(tmp_path) -> None:
    """Lowering only (any CPU): the tasks a dataset measures are those a default run on the target tunes."""
    import tvm

    from autosearch.search.dataset import dataset_tasks
    from tests.bf16_models import amx_target

    model = str(tmp_path / "conv.onnx")
    small_conv_onnx(model)
    plain = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    intel_dot = tvm.target.Target({"kind": "llvm", "mcpu": "cooperlake", "mattr": ["+avx512bf16"], "num-cores": 2})
    # AMX doubles fp32's rate and runs the whole conv: a run tunes the NHWC model alone (tests/test_layout_choice.py)
    for target, bf16, layouts in ((amx_target(), 1, ["NHWC"]), (plain, 0, ["NCHW", "NHWC"]),
                                  (intel_dot, 1, ["NCHW", "NHWC"])):
        first, more = dataset_tasks(model, target, count=1)
        dtypes = [{dtype for _, dtype in t.args} for t in first + more]
        assert sum("bfloat16" in d for d in dtypes) == bf16 and len(first) == len(layouts) + bf16
        assert sorted(t.lowering["layout"] for t in first if t.lowering["precision"] == "fp32") == layouts


def test_precision_keeps_one_side_of_the_dataset(tmp_path) -> None:
    """Lowering only (any CPU): ``--precision bf16`` measures the unit's tasks alone, ``fp32`` the fp32 ones alone;
    bf16 for a target without a unit is the one-line error ``run`` gives."""
    import tvm

    from autosearch.errors import UserError
    from autosearch.search.dataset import dataset_tasks
    from tests.bf16_models import amx_target

    model = str(tmp_path / "conv.onnx")
    small_conv_onnx(model)
    dtypes = {precision: [{dtype for _, dtype in t.args} for t in sum(dataset_tasks(
        model, amx_target(), count=1, precision=precision), [])] for precision in ("auto", "fp32", "bf16")}
    assert len(dtypes["auto"]) == 2 and len(dtypes["fp32"]) == 2 and len(dtypes["bf16"]) == 1  # auto: NHWC alone
    assert all("bfloat16" not in d for d in dtypes["fp32"]) and all("bfloat16" in d for d in dtypes["bf16"])
    plain = tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})
    with pytest.raises(UserError, match="--precision bf16: this CPU has no bf16 unit"):
        dataset_tasks(model, plain, count=1, precision="bf16")


def test_the_dataset_measures_the_matmuls_and_attentions_on_the_unit_too(tmp_path) -> None:
    """Lowering only (any CPU): on AMX, a model's fused attention and its bf16 matmul are dataset tasks (a ranker of
    convolutions alone ranks an attention's schedules at chance), its fp32 matmuls are not."""
    from autosearch.search.dataset import dataset_tasks
    from autosearch.tensor_units import attention, matmul
    from tests.bf16_models import amx_target
    from tests.test_bf16_matmul import gram_onnx

    model = str(tmp_path / "attention.onnx")
    gram_onnx(model, softmax=True)
    first, more = dataset_tasks(model, amx_target(), count=4)
    names = [t.name for t in first + more]
    assert sum(attention.TASK_NAME in n for n in names) == 1 and sum(matmul.TASK_NAME in n for n in names) == 1
    assert len(names) == 2, names


def test_every_prefix_of_the_joining_order_spreads_over_flops() -> None:
    from types import SimpleNamespace

    from autosearch.search.dataset import spread_order

    tasks = [SimpleNamespace(flops=float(f)) for f in (5, 1, 9, 3, 7, 2, 8, 4, 6)]
    order = [t.flops for t in spread_order(tasks)]
    assert sorted(order) == sorted(t.flops for t in tasks)  # each task once
    assert order[:3] == [1, 9, 5]  # the cheapest, the costliest, the middle
    assert set(order[3:5]) == {3, 7}  # then the quarters


def _task_order(path: str) -> list[str]:
    return [json.loads(line)["task"]["workload_key"] for line in open(path) if '"kind":"task"' in line]


def test_the_other_tasks_join_once_the_first_are_done_and_resume_in_order(tmp_path, capfd) -> None:
    """Tasks done before the minutes are: the model's other conv tasks join one by one, so the budget buys records
    instead of ending early; the same command again takes them back in the same order, measuring none twice."""
    model = str(tmp_path / "two.onnx")
    two_wide_convs_onnx(model)
    out = str(tmp_path / "mine")
    args = ("train-model", "--measure", "--model", model, "--tasks-per-layout", "1", "--out", out, "--folds", "2",
            "--minutes", "5")
    proc = run_cli_here(capfd, *args, "--per-task", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dataset = os.path.join(out, "dataset.jsonl")
    first, order = _trials(dataset), _task_order(dataset)
    header = json.loads(open(dataset).readline())["run"]
    # one task per fp32 layout a run tunes (NHWC alone where this CPU's bf16 unit doubles the fp32 rate) and the bf16
    # one where it has a unit, from the start; then the other conv tasks of both layers (direct NHWC, direct and
    # Winograd NCHW, bf16) joined; each measured to the cap
    from autosearch.frontend.target import parse_target
    from autosearch.search.dataset import run_layouts

    layouts = run_layouts(model, parse_target(None))
    assert header["tasks"] == len(layouts) + bool(_host_bf16_unit())
    assert header["more_tasks"] >= (3 if "NCHW" in layouts else 2)
    assert len(first) == header["tasks"] + header["more_tasks"] and all(len(t) == 1 for t in first.values())
    said = " ".join((proc.stdout + proc.stderr).split())  # the console wraps its lines at its width
    assert f"then its {header['more_tasks']} other such tasks one by one" in said

    proc = run_cli_here(capfd, *args, "--per-task", "2", "--force")
    assert proc.returncode == 0, proc.stderr[-2000:]
    second = _trials(dataset)
    assert _task_order(dataset) == order  # no task header written twice: every task taken back, in order
    assert set(second) == set(first) and all(len(t) == 2 for t in second.values())
    for key, trials in second.items():
        assert trials[:1] == first[key]
        configs = [json.dumps(t["config"], sort_keys=True) for t in trials]
        assert len(set(configs)) == len(configs)


@pytest.mark.parametrize("extra, message", [
    (("--minutes", "0"), "needs --minutes, a positive number"),
    ((), "needs --minutes, a positive number"),
    (("--minutes", "1", "--per-task", "0"), "--per-task must be positive"),
    (("--minutes", "1", "--target", "{kind: llvm}"), "malformed --target: not valid JSON"),
    (("--minutes", "1", "--precision", "fp16"), "unknown --precision 'fp16'"),
    (("--minutes", "1", "--runner", "rpc"), "unknown runner 'rpc'; valid runners: "),
    (("--minutes", "1", "--runner-option", "threads=1"), "runner 'local' has no option 'threads'"),
    (("--minutes", "1", "--precision", "bf16", "--target", '{"kind": "llvm", "mcpu": "x86-64"}'),
     "--precision bf16: this CPU has no bf16 unit"),
])
def test_bad_measure_options_are_one_line_errors(tmp_path, extra, message, capfd) -> None:
    proc = run_cli_here(capfd, "train-model", "--measure", "--out", str(tmp_path / "m"), *extra)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_an_unwritable_out_and_no_records_at_all_are_one_line_errors(tmp_path, capfd) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = run_cli_here(capfd, "train-model", "--measure", "--minutes", "1", "--out", str(blocker / "sub"))
    assert proc.returncode == 2 and "cannot write to" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli_here(capfd, "train-model", "--out", str(tmp_path / "m"))
    assert proc.returncode == 2 and "needs --log (measured records) or --measure" in proc.stderr
