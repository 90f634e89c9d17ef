"""The append-only tuning log: round trip, truncated last line, corrupt lines with line numbers."""

from __future__ import annotations

import json

import pytest

from autosearch.errors import UserError
from autosearch.records import TuningLog, read_log
from autosearch.types import Config, MeasureResult, Record, Status


def _rec(i: int, status: Status = Status.OK, latency: float = 1e-3) -> Record:
    result = MeasureResult(status, (latency, latency * 1.1, latency * 0.9) if status is Status.OK else (),
                           error="" if status is Status.OK else "boom")
    return Record(kind="trial", task_key="k1", task_name="conv", target={"kind": "llvm"},
                  config=Config(0, ((1, 2), i)), result=result, flops=2e6, trial=i)


def test_round_trip_and_best(tmp_path):
    path = str(tmp_path / "run.jsonl")
    with TuningLog(path) as log:
        log.write_task({"workload_key": "k1", "name": "conv"})
        log.append([_rec(1, latency=3e-3), _rec(2, Status.WRONG_RESULT), _rec(3, latency=1e-3)])
        log.append([_rec(4, Status.WORKER_CRASHED), _rec(5, latency=2e-3)])
    contents = read_log(path)
    assert not contents.corrupt and not contents.truncated_tail
    assert [r.trial for r in contents.trials("k1")] == [1, 2, 3, 4, 5]
    best = contents.best("k1")
    assert best.trial == 3 and best.result.status is Status.OK
    assert contents.records[1].result.status is Status.WRONG_RESULT and contents.records[1].latency == float("inf")
    line = json.loads(open(path).readlines()[1])
    assert line["result"]["median"] == pytest.approx(1e-3 * 1.0) or line["result"]["median"] > 0
    assert {"versions", "host", "worker", "started", "finished", "build_secs", "run_secs"} <= set(line)
    assert "measured_on" not in line  # said only where a measuring process said it
    assert line["result"]["gflops"] > 0 and "cv" in line["result"]


def test_the_cpu_that_timed_a_record_reads_back(tmp_path):
    path = str(tmp_path / "run.jsonl")
    timed = _rec(1)
    timed.result = MeasureResult(Status.OK, (1e-3,), measured_on="znver4", waited=0.4)
    with TuningLog(path) as log:
        log.append([timed, _rec(2)])
    back, older = read_log(path).records
    assert back.result.measured_on == "znver4" and back.timed_on == "znver4"
    assert back.result.waited == 0.4 and back.result.disturbed  # its threads' wait for a core, as timed
    assert older.result.waited is None and not older.result.disturbed  # not counted: a log from before the field


def test_truncated_last_line_is_tolerated_and_resume_appends_cleanly(tmp_path):
    path = str(tmp_path / "run.jsonl")
    with TuningLog(path) as log:
        log.append([_rec(1), _rec(2)])
    with open(path, "ab") as fh:  # a crash in the middle of writing line 3
        fh.write(json.dumps(_rec(3).to_json()).encode()[:50])
    contents = read_log(path)
    assert contents.truncated_tail and not contents.corrupt and len(contents.records) == 2
    with TuningLog(path, resume=True) as log:
        log.append([_rec(4)])
    contents = read_log(path)
    assert [r.trial for r in contents.records] == [1, 2, 4]
    assert len(contents.corrupt) == 1 and ":3:" in contents.corrupt[0]  # the old partial line, now mid-file


def test_corrupt_line_is_reported_with_its_line_number(tmp_path):
    path = str(tmp_path / "run.jsonl")
    with TuningLog(path) as log:
        log.append([_rec(1)])
    with open(path, "a") as fh:
        fh.write("{not json}\n")
        fh.write('{"kind": "alien"}\n')
    with TuningLog(path, resume=True) as log:
        log.append([_rec(2)])
    contents = read_log(path)
    assert [r.trial for r in contents.records] == [1, 2]
    assert [c[len(path):].split(":")[1] for c in contents.corrupt] == ["2", "3"]
    assert all(c.startswith(path) for c in contents.corrupt)


def test_existing_log_is_refused_without_resume(tmp_path):
    path = str(tmp_path / "run.jsonl")
    with TuningLog(path) as log:
        log.append([_rec(1)])
    with pytest.raises(UserError, match="--resume"):
        TuningLog(path)
    assert len(read_log(path).records) == 1


def test_unwritable_log_path_is_a_user_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match="cannot write"):
        TuningLog(str(blocker / "sub" / "run.jsonl"))


def test_tasks_named_after_amx_in_an_older_log_read_under_todays_names(tmp_path) -> None:
    """The bf16 kernels were named ``conv2d_amx_bf16`` (and ``matmul_``, ``attention_``) whatever the unit: an older
    log's headers and records read as today's import names them, the file itself untouched."""
    from autosearch.records import current_task_name, read_log

    names = ["fused_conv2d_amx_bf167_add4", "attention_amx_bf1611", "fused_conv2d_winograd_bf16_add"]
    lines = [{"v": 1, "kind": "task", "task": {"workload_key": str(i), "name": name, "index": i}}
             for i, name in enumerate(names)]
    lines += [{"v": 1, "kind": "trial", "task": {"key": "1", "name": "attention_amx_bf1611"}, "trial": 0,
               "config": {"sketch": 0, "values": [[0, 1]]}, "result": {"status": "ok", "latencies": [1e-3]}}]
    path = tmp_path / "old.jsonl"
    text = "".join(json.dumps(line) + "\n" for line in lines)
    path.write_text(text)
    contents = read_log(str(path))
    assert [t["name"] for t in contents.tasks.values()] == ["fused_conv2d_bf167_add4", "attention_bf1611",
                                                            "fused_conv2d_winograd_bf16_add"]
    assert [r.task_name for r in contents.records] == ["attention_bf1611"] and not contents.corrupt
    assert path.read_text() == text
    assert current_task_name("fused_matmul_amx_bf162_add") == "fused_matmul_bf162_add"
    assert current_task_name("fused_conv2d3_add2") == "fused_conv2d3_add2"
