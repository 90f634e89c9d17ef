"""Deliberately broken kernels with the small conv task's signature, and how tests run them in a worker.

Faults reach the product only as what it really meets: kernels that abort, hang, compute the wrong
output or do not build. The product has no switch to crash or hang on command.
"""

from __future__ import annotations

from tvm.script import ir as I
from tvm.script import tirx as T

# The small conv task: x (1,16,28,28), W (32,16,3,3) -> out (1,32,28,28)
ARGS = [((1, 16, 28, 28), "float32"), ((32, 16, 3, 3), "float32"), ((1, 32, 28, 28), "float32")]


@I.ir_module
class Crash:
    @T.prim_func
    def main(a: T.Buffer((1, 16, 28, 28), "float32"), w: T.Buffer((32, 16, 3, 3), "float32"),
             out: T.Buffer((1, 32, 28, 28), "float32")):
        T.func_attr({"tirx.noalias": True})
        T.evaluate(T.call_extern("int32", "abort"))


@I.ir_module
class Hang:
    @T.prim_func
    def main(a: T.Buffer((1, 16, 28, 28), "float32"), w: T.Buffer((32, 16, 3, 3), "float32"),
             out: T.Buffer((1, 32, 28, 28), "float32")):
        T.func_attr({"tirx.noalias": True})
        T.evaluate(T.call_extern("int32", "sleep", 3600))


@I.ir_module
class Wrong:
    @T.prim_func
    def main(a: T.Buffer((1, 16, 28, 28), "float32"), w: T.Buffer((32, 16, 3, 3), "float32"),
             out: T.Buffer((1, 32, 28, 28), "float32")):
        T.func_attr({"tirx.noalias": True})
        for c, h, x in T.grid(32, 28, 28):
            out[0, c, h, x] = a[0, 0, h, x]


@I.ir_module
class BuildFails:
    @T.prim_func
    def main(a: T.Buffer((1, 16, 28, 28), "float32"), w: T.Buffer((32, 16, 3, 3), "float32"),
             out: T.Buffer((1, 32, 28, 28), "float32")):
        T.func_attr({"tirx.noalias": True})
        for c in T.thread_binding(32, thread="threadIdx.x"):  # GPU thread binding on a CPU target
            out[0, c, 0, 0] = a[0, 0, 0, 0]


FAULTS = {"crash": Crash, "hang": Hang, "wrong": Wrong, "build": BuildFails}


def artifact(name: str, target) -> bytes:
    """The faulty kernel ``name`` built in this process, as a build worker builds it."""
    import tvm

    from autosearch.frontend.target import target_to_json
    from autosearch.measure.kernels import build

    return build(tvm.ir.save_json(FAULTS[name]), target_to_json(target))[0]


def run_in(worker, kernel: bytes, *, timeout: float):
    """Run a built kernel in a worker process as a reference run does (once, then timed): the ``crash``
    kernel takes the process down (``crashed``), the ``hang`` kernel never answers (``timeout``)."""
    return worker.call("reference", "fault", kernel, ARGS, 0, {"repeat": 1, "min_repeat_ms": 0}, timeout=timeout)
