"""TVM's pooling annotations get the rule TVM applies on a miss, without its warning on stderr."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import small_conv_onnx

# Each mode runs in a process of its own: a registered rule is process-wide, so a process that ever made a
# DecisionSpace can no longer show what plain TVM does.
_SCRIPT = """
import json, sys
from tvm.s_tir import meta_schedule as ms
from autosearch.frontend.importer import import_model
from autosearch.frontend.target import parse_target

path, mode = sys.argv[1], sys.argv[2]
task = next(t for t in import_model(path, parse_target(None)).tasks if "pool" in t.name)
if mode == "tvm":
    from autosearch.search.space import _SCHEDULE_SEED
    from autosearch.tvm_compat import import_tensor_intrinsics

    import_tensor_intrinsics("llvm", "x86_64")
    ctx = ms.TuneContext(mod=task.mod, target=task.target, space_generator=ms.space_generator.PostOrderApply(),
                         rand_state=_SCHEDULE_SEED, num_threads=1)  # as DecisionSpace makes them
    traces = [str(s.trace.simplified(remove_postproc=True)) for s in ctx.generate_design_space()]
else:
    from autosearch.search.space import DecisionSpace

    traces = [str(s.trace) for s in DecisionSpace(task.mod, task.target).sketches]
print(json.dumps({"traces": traces, "annotated": "meta_schedule.pool_max" in task.mod.script()}))
"""


def _sketches(path: str, mode: str) -> tuple[dict, str]:
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, path, mode], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


@pytest.mark.slow
def test_a_pooling_task_gets_tvms_own_sketches_and_no_warning(tmp_path):
    path = str(tmp_path / "small_conv.onnx")
    small_conv_onnx(path)
    plain, plain_err = _sketches(path, "tvm")
    ours, our_err = _sketches(path, "space")
    assert plain["annotated"] and ours["annotated"]  # the pooling block carries TVM's annotation
    assert "Unknown schedule rule" in plain_err  # TVM alone warns of it, on stderr
    assert "Unknown schedule rule" not in our_err
    assert ours["traces"] == plain["traces"] and plain["traces"]  # the annotation removed as TVM removes it
    assert all("schedule_rule" in trace for trace in ours["traces"])
