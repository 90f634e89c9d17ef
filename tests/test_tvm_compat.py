"""The lighter TVM import (:func:`autosearch.tvm_compat.lighten_tvm_import`) gives the same TVM as a plain import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# Every ``tvm`` module a design space, a build and a model's compile use, then each loaded module's names and the
# library's global functions, as JSON on stdout. torch is blocked in both processes: it is not what is compared.
_NAMES = """
import json, sys
sys.modules["torch"] = None
listed = []  # each time TVM's import entered the lighter import's listing
if sys.argv[1] == "light":
    from autosearch import tvm_compat
    once = tvm_compat._global_names_listed_once
    tvm_compat._global_names_listed_once = lambda: (listed.append(1), once())[1]
    tvm_compat.lighten_tvm_import()
import tvm, tvm.relax, tvm.s_tir.meta_schedule, tvm.topi
from tvm_ffi import registry
names = {m: sorted(dir(mod)) for m, mod in sys.modules.items() if m.split(".")[0] == "tvm" and mod is not None}
print(json.dumps({"modules": names, "functions": sorted(registry.list_global_func_names()),
                  "listing": registry.list_global_func_names.__module__, "lighter": bool(listed)}))
"""


def _names(how: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", _NAMES, how], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_the_lighter_import_gives_every_module_the_same_names_and_restores_the_listing():
    plain, light = _names("plain"), _names("light")
    assert light["lighter"] and not plain["lighter"]  # the package's import went through the lighter path
    assert len(plain["modules"]) > 100 and len(plain["functions"]) > 1000  # the whole package was compared
    assert light["modules"].keys() == plain["modules"].keys()
    differ = [m for m in plain["modules"] if light["modules"][m] != plain["modules"][m]]
    assert not differ, differ[:5]
    assert light["functions"] == plain["functions"]
    assert light["listing"] == plain["listing"] == "tvm_ffi.registry"  # TVM's own listing again after the import


@pytest.mark.parametrize("value", ["abc", "0", "-2", "1.5"])
def test_a_thread_count_in_the_environment_that_is_not_one_is_a_one_line_error(value, monkeypatch):
    from autosearch.errors import UserError
    from autosearch.tvm_compat import bind_thread_pool

    monkeypatch.setenv("TVM_NUM_THREADS", value)
    with pytest.raises(UserError, match=rf"^TVM_NUM_THREADS must be a positive integer, not '{value}'$"):
        bind_thread_pool()
