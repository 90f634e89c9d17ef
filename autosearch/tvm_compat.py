"""Workarounds for costs and quirks of the installed TVM (0.27), in one place."""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import os
import sys
import types

_LLVM_INTRINSICS = ("x86", "arm_cpu", "rocm", "hexagon", "riscv_cpu")


def _modules_for(mtriple: str) -> tuple[str, ...]:
    """The intrinsic modules LLVM schedule rules can use on this architecture (all if unknown)."""
    arch = mtriple.split("-")[0]
    if arch in ("x86_64", "i686", "i386"):
        return ("x86",)
    if arch.startswith(("aarch64", "arm")):
        return ("arm_cpu",)
    if arch.startswith("riscv"):
        return ("riscv_cpu",)
    return _LLVM_INTRINSICS


class _LightTvmImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``tvm`` once, and runs its package import lighter (see :func:`lighten_tvm_import`)."""

    def __init__(self) -> None:
        self.inner: importlib.abc.Loader | None = None

    def find_spec(self, fullname, path, target=None):
        if fullname != "tvm":
            return None
        sys.meta_path.remove(self)  # one use; the lookup below goes to the finders after it
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        self.inner, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        module.__loader__ = module.__spec__.loader = self.inner  # the package as importlib would leave it
        hidden = "torch" not in sys.modules  # a process that blocked torch itself (None there) keeps it blocked
        if hidden:
            sys.modules["torch"] = None  # type: ignore[assignment]  # ``import torch`` raises ImportError
        try:
            with _global_names_listed_once():
                self.inner.exec_module(module)
        finally:
            if hidden and "torch" in sys.modules and sys.modules["torch"] is None:
                del sys.modules["torch"]


@contextlib.contextmanager
def _global_names_listed_once():
    """While TVM's package imports: ``tvm_ffi``'s list of global function names made once, and again only when the
    number of names has changed (a module registered functions of its own since).

    Each of the package's ``_ffi_api`` modules (about fifty) calls ``tvm_ffi.init_ffi_api``, which lists every
    global function of the library (thousands) by one FFI call per name, to keep the few under its prefix: the
    same list each time, rebuilt in Python, a large part of the import. The modules get the same functions
    (``tests/test_tvm_compat.py`` compares every ``tvm`` module's names with and without it).
    """
    from tvm_ffi import registry

    original = registry.list_global_func_names
    listed: list[str] = []

    def names() -> list[str]:
        functor = registry.get_global_func("ffi.FunctionListGlobalNamesFunctor")()
        count = functor(-1)
        if len(listed) != count:
            listed[:] = [functor(i) for i in range(count)]
        return list(listed)

    registry.list_global_func_names = names
    try:
        yield
    finally:
        registry.list_global_func_names = original


def lighten_tvm_import() -> None:
    """Import TVM, when this process first does, without PyTorch and listing TVM's functions once; torch stays
    importable afterwards.

    TVM 0.27 and its ``tvm_ffi`` import PyTorch when it is installed (the ``[learned]`` extra), only to exchange
    tensors with it, which autosearch never does: most of the time of ``import tvm``, in every process that
    imports TVM. Hidden during TVM's own import, torch is found normally when a learned cost model imports it
    later. What is left of the import lists the library's functions again for each of its modules
    (:func:`_global_names_listed_once`). For the processes autosearch starts itself (the CLI, experiment scripts,
    ``report``'s timing processes, one per runtime and round, the measuring and build workers, each run's and each
    finalist round's and each restart's). A process that imported torch first gets the second saving only. A no-op
    once TVM is loaded.
    """
    if "tvm" in sys.modules or any(isinstance(f, _LightTvmImport) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _LightTvmImport())


# TVM's thread-pool affinity modes (ThreadGroup::AffinityMode) given a list of cores: a thread bound to each core,
# or all threads sharing them.
THREADPOOL_ONE_CORE_PER_THREAD = -2
THREADPOOL_SHARE_CORES = -3


def bind_thread_pool(threads: int | None = None, *, hold_caller: bool = True) -> int:
    """Run TVM's kernels on ``threads`` threads (default: ``TVM_NUM_THREADS`` where it is set, else every core this
    process may run on), all of them on the cores this process may run on; returns the threads.

    Left to itself, TVM's pool binds its threads to the machine's first cores whatever the process's affinity
    (its default mode, "big cores"), and with ``TVM_NUM_THREADS`` above one it widens the calling thread to every
    core: a process held to core 0 (``taskset``, a pinned test worker, a measuring device given its cores) had its
    second thread on core 1 and its first roaming both, timed against whatever ran there. Without the variable it
    takes half the logical CPUs on x86 (it assumes two hardware threads per core): one thread on a 2-vCPU VM. TVM
    has one pool per process: this sets it for everything the process runs after. The calling thread is the pool's
    first worker, and TVM leaves it free on all the pool's cores: ``hold_caller`` holds it to
    :func:`caller_core` from now on (a process that only runs kernels); a process that goes on to do other work
    holds it there for each call instead (:class:`~autosearch.deploy.artifact.LoadedModel`)."""
    import tvm

    from autosearch.errors import UserError

    if not threads:
        variable = os.environ.get("TVM_NUM_THREADS", "").strip()
        if variable and (not variable.isdigit() or int(variable) < 1):
            raise UserError(f"TVM_NUM_THREADS must be a positive integer, not {variable!r}")
        threads = int(variable or 0) or len(process_cores())
    mode, cores = _pool_cores(threads)
    tvm.get_global_func("runtime.config_threadpool")(mode, threads, [str(c) for c in cores])
    held = _held_core(mode, cores, threads)
    if hold_caller and held is not None:
        os.sched_setaffinity(0, {held})
    return threads


def process_cores() -> list[int]:
    """The cores the calling thread may run on, in order (its affinity; every core where the OS has none)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))  # pragma: no cover - non-Linux


def _pool_cores(threads: int) -> tuple[int, list[int]]:
    """(TVM's affinity mode, the cores) for a pool of ``threads`` on the cores the calling thread may run on: one
    core per thread, and no more cores than threads (the pool starts a worker per core it is given whatever the
    thread count, and a spare one spins on its core between kernels); more threads than cores share them."""
    cores = process_cores()
    if threads <= len(cores):
        return THREADPOOL_ONE_CORE_PER_THREAD, cores[:threads]
    return THREADPOOL_SHARE_CORES, cores


def caller_core(threads: int) -> int | None:
    """The core the calling thread should run kernels on in a pool of ``threads`` (None: it stays free).

    The calling thread runs the pool's first share of each kernel, and TVM leaves it free on every core it was
    given: woken on another worker's core, it shared that core with it through whole kernels while one stood idle.
    Held to the pool's first core, each thread has one of its own."""
    return _held_core(*_pool_cores(threads), threads)


def _held_core(mode: int, cores: list[int], threads: int) -> int | None:
    return cores[0] if mode == THREADPOOL_ONE_CORE_PER_THREAD and threads > 1 else None


# TIR passes of TVM's default pipeline that autosearch's CPU builds leave out (see :func:`build_context`).
CPU_SKIPPED_PASSES = ("s_tir.RenormalizeSplitPattern",)


def build_context(target_kind: str = "llvm", *, opt_level: int | None = None):
    """The pass context of every build autosearch makes (a trial's kernel, an untuned one, the model): the current
    context (its instruments and options kept; ``opt_level`` if given), less :data:`CPU_SKIPPED_PASSES` for a CPU.

    ``RenormalizeSplitPattern`` rewrites ``floordiv(floormod(x, a*b), b)`` index patterns into ones GPU code
    generation simplifies better. On a CPU it runs after loop unrolling, on every unrolled index: on a Winograd
    kernel, whose unrolled transforms carry TOPI's transform matrices as chains of ``Select`` on ``floormod``
    indices, it was a quarter of the build, and a Winograd trial builds in three times a direct one's time. Left
    out, about a third of the best Winograd kernels of a run compile to other index arithmetic, which times the same,
    and the rest to the same assembly (``experiments/winograd_build.py``). It only rewrites integer indices: every
    value a kernel computes is the same. The tuning builds and the model's build both run in this context, so the
    kernels a run times are the kernels the model runs.
    """
    import tvm

    current = tvm.transform.PassContext.current()
    skipped = CPU_SKIPPED_PASSES if target_kind == "llvm" else ()
    return tvm.transform.PassContext(
        opt_level=current.opt_level if opt_level is None else opt_level, required_pass=list(current.required_pass),
        disabled_pass=sorted({*current.disabled_pass, *skipped}), instruments=list(current.instruments),
        config=dict(current.config))


def map_prim_funcs(mod, rewrite):
    """``mod`` with ``rewrite`` applied to each of its PrimFuncs (Relax functions as they are): a copy where one
    changed (``update_func`` changes a module in place, and the caller's stays as it was), ``mod`` itself where
    ``rewrite`` returned every function as it was."""
    from tvm import tirx

    rewritten = ((gv, f, rewrite(f)) for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc))
    changed = {gv: new for gv, f, new in rewritten if not new.same_as(f)}
    if not changed:
        return mod
    mod = mod.clone()
    for gv, f in changed.items():
        mod.update_func(gv, f)
    return mod


def import_tensor_intrinsics(target_kind: str = "llvm", mtriple: str = "") -> None:
    """Register TVM's tensor intrinsics without the CUDA ones when the target is a CPU.

    ``TuneContext`` imports ``tvm.s_tir.tensor_intrin``, whose package ``__init__`` imports the CUDA
    intrinsics first: most of that import's time (seconds), spent for a CPU target that never uses them.
    For CPU targets we register the package without running its ``__init__`` and import exactly the
    modules that ``__init__`` imports for LLVM on the target's architecture (x86 rules only reference x86
    intrinsics), so the schedule rules (e.g. ``MultiLevelTilingWithIntrin``) see the same intrinsics as
    under ``ms.tune_tir``. GPU targets get the full import.
    """
    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules:
        return
    if target_kind != "llvm":
        importlib.import_module(name)
        return
    import tvm.s_tir

    package = types.ModuleType(name, "Tensor intrinsics (registered for LLVM targets only by autosearch)")
    package.__path__ = [os.path.join(os.path.dirname(tvm.s_tir.__file__), "tensor_intrin")]
    package.__package__ = name
    sys.modules[name] = package
    tvm.s_tir.tensor_intrin = package
    for sub in _modules_for(mtriple):
        setattr(package, sub, _exec_module(f"{name}.{sub}"))


# The ``schedule_rule`` annotations TVM's own pooling operators (topi) put on their blocks, for which TVM 0.27
# registers no rule on CPU targets
_POOL_RULES = ("meta_schedule.pool_max", "meta_schedule.adaptive_pool_max")


def register_pool_rules(keys) -> None:
    """Give TVM's pooling annotations, for the target keys ``keys``, the rule TVM applies when it finds none.

    ``ApplyCustomRule`` looks up ``s_tir.meta_schedule.<key>.<annotation>``; on a miss it logs a warning to
    stderr (one per pooling block and sketch, in the middle of a run's progress) and removes the annotation. The
    rule registered here does exactly that removal, silently: the sketches, their traces and so every workload key
    and config stay as TVM made them. A rule registered before (by TVM or anyone) is left in place.
    """
    import tvm

    for key in keys:
        for rule in _POOL_RULES:
            name = f"s_tir.meta_schedule.{key}.{rule}"
            if tvm.get_global_func(name, allow_missing=True) is None:
                tvm.register_global_func(name, _unannotate_rule)


def _unannotate_rule(sch, block):
    sch.unannotate(block, "schedule_rule")
    return [sch]


def _exec_module(name: str) -> types.ModuleType:
    """Import module ``name`` by running its code from here rather than through importlib's loader.

    Every ``T.prim_func`` of an intrinsics module calls ``inspect.stack()``, which looks up the source file of
    each frame on the stack. importlib's own frames are frozen, in no file, so each of those lookups walks all
    of ``sys.modules``: most of the import's time, in every process that builds a design space. Run from here,
    the module's code has only frames of real files below it. Its own imports go through importlib as usual.
    """
    spec = importlib.util.find_spec(name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        exec(spec.loader.get_code(name), module.__dict__)  # noqa: S102 - the installed TVM's own module
    except BaseException:
        del sys.modules[name]
        raise
    return module


def to_plain_json(obj):
    """TVM containers / immediates (as in ``Trace.as_json()``) -> plain Python JSON values."""
    from tvm.tirx import FloatImm, IntImm

    if obj is None or isinstance(obj, bool | int | float):
        return obj
    if isinstance(obj, IntImm | FloatImm):
        return obj.value
    if isinstance(obj, str):
        return str(obj)
    if hasattr(obj, "items"):
        return {str(to_plain_json(k)): to_plain_json(v) for k, v in obj.items()}
    if hasattr(obj, "__iter__"):
        return [to_plain_json(x) for x in obj]
    raise TypeError(f"cannot convert {type(obj).__name__} to JSON")


def fast_build(mod, target, _params=None):
    """MetaSchedule's ``default_build`` without importing every tensor intrinsic in each worker.

    Used as ``ms.builder.LocalBuilder(f_build=fast_build)`` when comparing with TVM's own tuner: the
    default build function imports all of ``tvm.s_tir.tensor_intrin`` in every fresh worker of every batch,
    which on a small machine can outlast the builder's 30 s timeout, so trials are lost to the import
    rather than to the kernel (README, "Measurement pipeline", has the comparison).
    """
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)
