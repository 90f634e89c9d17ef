"""A compiled model on disk: the shared library (the kernels and the Relax VM's code) and, beside it, its weights.

Why the weights are not in the library: TVM 0.27 loads constants bound into a library from a section of the
shared object, and on the way holds them four times (the mapped section, a byte-string copy, an ``ffi.Bytes``
copy, then the deserialised tensors; ``ProcessLibraryBin`` in tvm_ffi's ``library_module.cc``,
``VMExecutable::LoadFromBytes``), two of them for as long as the model stays loaded (the mapped file and the
tensors). So the build lifts every tensor constant of the model's ``main`` into a parameter (:func:`lift_weights`)
and saves their values in TVM's own parameter format (``tvm.runtime.save_param_dict_to_file``) next to the
library (:func:`weights_path`: ``model.so`` -> ``model.params``); :func:`load_model` reads them with
``tvm.runtime.load_param_dict_from_file``, which reads each tensor from the file into its own buffer: the
weights are held once, while loading and after.

The lift is the last step before the build, after the weight transforms were folded into the constants at
compile time (the prepacking of tuned kernels, ``SplitLayoutRewritePreproc`` + ``FoldConstant``; the Winograd
kernel transform): the file holds the weights exactly as the kernels read them, and the kernels, their order
and their tuning-database matches are the same as with the weights bound in. The other TVM recipe,
``LiftTransformParams`` (raw weights in the file, the transforms run at load by a ``transform_params``
function), holds the raw and the transformed weights at once when that function returns (twice the weights
for prepacked layers); it also needs the weights as parameters from the import on, so the arithmetic
``FoldConstant`` now folds into them before fusion (BatchNorm's, for one) would be lifted or fused instead, and
the kernels' workload keys would have to be shown to match the tuned tasks' again.

``main`` takes the model's inputs first, then the weights (parameters named ``weight_<i>``, the file's keys;
its ``num_input`` attribute counts the inputs): with plain TVM, ``vm["main"](*inputs, *weights)``.
A library built before the weights moved out (its ``main`` takes no weights) still loads.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from autosearch.errors import UserError

WEIGHT_PREFIX = "weight_"  # main's weight parameters and the weights file's keys: weight_0, weight_1, ...
WEIGHTS_SUFFIX = ".params"


def weights_path(library: str) -> str:
    """Where a library's weights are saved: beside it, its extension replaced (``model.so`` -> ``model.params``)."""
    path = os.path.splitext(library)[0] + WEIGHTS_SUFFIX
    if os.path.abspath(path) == os.path.abspath(library):
        raise UserError(f"the compiled library {library} would overwrite its own weights file: name it, e.g., "
                        f"{os.path.splitext(library)[0]}.so")
    return path


def compiled_files(library: str) -> tuple[str, str]:
    """The files a compiled model is made of: the library and its weights."""
    return library, weights_path(library)


def lift_weights(mod) -> tuple[Any, dict[str, Any]]:
    """``mod`` with every tensor constant of its ``main`` turned into a trailing parameter of ``main`` (a constant
    used twice becomes one parameter), and the constants' values by parameter name."""
    from tvm import relax

    func = mod["main"]
    lifter = _constant_lifter()(mod)
    body = lifter.visit_expr(func.body)
    params = [*func.params, *lifter.params.values()]
    lifted = relax.Function(params, body, func.ret_ty, func.is_pure, func.attrs, func.span)
    out = mod.clone()
    out["main"] = lifted.with_attr("num_input", len(func.params))
    return relax.transform.Normalize()(out), lifter.values


def _constant_lifter():
    """The mutator class (made when called: it derives from TVM's, and this module must import without TVM)."""
    from tvm import relax

    @relax.expr_functor.mutator
    class ConstantLifter(relax.PyExprMutator):
        def __init__(self, mod) -> None:
            super().__init__(mod)
            self.params: dict[Any, Any] = {}  # the constant's node handle -> its parameter
            self.values: dict[str, Any] = {}  # parameter name -> tvm.runtime.Tensor

        def visit_generic_const_(self, op):
            if not hasattr(op.value, "shape"):  # not a tensor
                return op
            key = op.__chandle__()
            if key not in self.params:
                name = f"{WEIGHT_PREFIX}{len(self.params)}"
                self.params[key] = relax.Var(name, op.ty)
                self.values[name] = op.value
            return self.params[key]

    return ConstantLifter


def save_weights(values: dict[str, Any], library: str) -> str:
    """Write the lifted weights beside ``library`` in TVM's parameter format; returns the path."""
    import tvm

    path = weights_path(library)
    tvm.runtime.save_param_dict_to_file(values, path)
    return path


@dataclass(frozen=True)
class CallTimes:
    """What one profiled pass spent in one symbol: seconds over all its calls, and how many calls."""

    seconds: float
    calls: int


def profile_calls(vm, run) -> dict[str, CallTimes]:
    """``run()`` (a pass of ``vm``'s code) with each call the VM makes timed by its instrument hook, per symbol.
    TVM 0.27 has no runtime profiler for the Relax VM, so the hook is a Python function: each interval holds, beside
    the call, the hook's own return into TVM and its next entry (the arguments converted to Python objects), a
    cost per call that a caller comparing many small kernels can measure on an empty one and take off."""
    import time

    import tvm

    seconds: dict[str, float] = {}
    calls: dict[str, int] = {}
    started: list[float] = []

    def instrument(func, symbol, before_run, ret_value, *args):
        if before_run:
            started.append(time.perf_counter())
        else:
            seconds[symbol] = seconds.get(symbol, 0.0) + time.perf_counter() - started.pop()
            calls[symbol] = calls.get(symbol, 0) + 1
        return 0  # VMInstrumentReturnKind.NO_OP: run the call as usual

    vm.set_instrument(tvm.runtime.convert(instrument))
    try:
        run()
    finally:
        vm.set_instrument(None)
    return {symbol: CallTimes(seconds[symbol], calls[symbol]) for symbol in seconds}


@dataclass
class LoadedModel:
    """A compiled model loaded for inference: ``model(*inputs)`` runs ``main`` on the inputs and the weights.

    ``hold``: the core the calling thread runs each call on (the thread pool's first share of every kernel:
    :func:`~autosearch.tvm_compat.caller_core`), its affinity put back after the call, so the process's other
    work, and what it reads of its own cores (a run's measuring processes are given the cores its caller may use),
    are as they were."""

    vm: Any  # tvm.relax.VirtualMachine
    weights: list[Any]  # tvm.runtime.Tensor, in main's parameter order
    hold: int | None = None

    def __post_init__(self) -> None:
        self._main = self.vm["main"]

    def __call__(self, *inputs):
        if self.hold is None:
            return self._main(*inputs, *self.weights)
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {self.hold})
        try:
            return self._main(*inputs, *self.weights)
        finally:
            os.sched_setaffinity(0, before)

    def profile(self, *inputs) -> dict[str, CallTimes]:
        """One forward pass timed call by call: per symbol (kernel or VM builtin) its seconds and calls
        (:func:`profile_calls`). Each figure includes the instrument's own cost per call: compare kernels, and
        take the model's latency from a plain timed run."""
        return profile_calls(self.vm, lambda: self(*inputs))


def load_model(library: str, *, threads: int | None = None) -> LoadedModel:
    """Load a compiled model on the CPU: the library, then its weights file (each weight read once, into its own
    tensor); a one-line error when the weights file is missing or belongs to another build.

    ``threads``: the threads TVM's runtime runs kernels on; by default ``TVM_NUM_THREADS`` where it is set, else
    every core this process may run on, all of them on the cores this process may run on
    (:func:`~autosearch.tvm_compat.bind_thread_pool`: TVM's own default would give a 2-vCPU VM one thread, and a
    process pinned to some cores threads on others). TVM has one thread pool per process, so this sets it for
    every model the process runs, as the variable does; with more than one thread each call holds the calling
    thread, which runs the pool's first share of each kernel, to the first of those cores, and lets it go after
    (:class:`LoadedModel`)."""
    import tvm
    from tvm import relax

    from autosearch.tensor_units.amx import request_permission
    from autosearch.tvm_compat import bind_thread_pool, caller_core

    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise UserError(f"threads must be a positive integer, not {threads!r}")
    hold = caller_core(bind_thread_pool(threads, hold_caller=False))
    request_permission()  # a model with bf16 layers runs AMX tile instructions: Linux grants them on request
    vm = relax.VirtualMachine(tvm.runtime.load_module(library), tvm.cpu())
    arity = vm.module["get_function_arity"]("main")
    names = [str(vm.module["get_function_param_name"]("main", i)) for i in range(arity)]
    wanted = _weight_params(names)
    if not wanted:  # weights bound into the library
        return LoadedModel(vm, [], hold)
    path = weights_path(library)
    if not os.path.exists(path):
        raise UserError(f"{library} needs its weights file {path}, which does not exist")
    weights = tvm.runtime.load_param_dict_from_file(path)
    if sorted(weights.keys()) != sorted(wanted):
        raise UserError(f"{path} holds {len(weights)} weights, not the {len(wanted)} of {library}: compile again")
    return LoadedModel(vm, [weights[n] for n in wanted], hold)


def _weight_params(names: list[str]) -> list[str]:
    """The weights among ``main``'s parameter names: the trailing ``weight_0 ... weight_<k-1>``, in that order, as
    :func:`lift_weights` appends them. By position, not by prefix: a model input may be called ``weight_...``."""
    last = re.fullmatch(rf"{WEIGHT_PREFIX}(\d+)", names[-1]) if names else None
    if last is None:
        return []
    count = int(last.group(1)) + 1
    tail = names[-count:] if count <= len(names) else []
    return tail if tail == [f"{WEIGHT_PREFIX}{i}" for i in range(count)] else []


__all__ = ["WEIGHTS_SUFFIX", "WEIGHT_PREFIX", "CallTimes", "LoadedModel", "compiled_files", "lift_weights",
           "load_model", "profile_calls", "save_weights", "weights_path"]
