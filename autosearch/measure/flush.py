"""What the time evaluator does to the CPU caches before each cold repeat: flush the kernel's arguments
(``clflushopt`` where the CPU has it, TVM's own flush elsewhere), or dirty the caches as a forward pass leaves them.

A cold timing (:class:`~autosearch.measure.base.EvaluatorConfig`) evicts a kernel's weights and outputs before
every call, as the layers before it do inside the model. TVM's ``cache_flush_cpu_non_first_arg`` evicts them one
cache line at a time with ``clflush``, which waits for each line: on a 2-vCPU Xeon VM it took 0.33 s for a
Winograd layer's 151 MB of transformed weights, ten times the kernel, and most of a run's measuring time.
``clflushopt`` evicts the same lines without waiting for each (an ``sfence`` after the last orders them all): 6 ms
there, and a read after either flush is equally slow, so the kernel meets its data as cold. Its flush is a TVM
kernel built here for the host, registered under :data:`FLUSH_OPT` with TVM's calling convention (every argument
but the first), so the time evaluator calls it by name like TVM's own.

Neither flushed nor warm is the state a kernel meets inside a model: there the kernels before it have just filled
every core's caches with lines they wrote, so its own reads first write those back, and a tuned kernel called alone
on the very tensors the model gives it runs faster than in the pass (``experiments/in_flow.py``). :data:`DIRTY`
reproduces that state: every thread of TVM's pool writes :data:`DIRTY_BYTES` of its own, more than any core's L2.
``cache_state="dirty"`` (:class:`~autosearch.measure.base.EvaluatorConfig`) times that way; it is not the default:
a task's winner in that state was hardly faster in it than the flushed state's winner, and a model tuned so no faster
than one tuned flushed (``experiments/cache_states.py``, docs/results.md).
"""

from __future__ import annotations

from autosearch.tensor_units.cpu import host_flags

TVM_FLUSH = "cache_flush_cpu_non_first_arg"  # TVM's flush: clflush, one line at a time
FLUSH_OPT = "autosearch.cache_flush_clflushopt"
LINE = 64  # bytes per cache line on every x86-64 CPU with clflushopt
DIRTY = "autosearch.cache_dirty"  # the caches left full of modified lines, as a forward pass leaves them
DIRTY_BYTES = 8 << 20  # written per thread: more than a core's L2 on every CPU measured (0.5-2 MiB)
CACHE_STATES = ("flushed", "dirty")  # EvaluatorConfig.cache_state


def _flush_kernel():
    """A function ``(bytes: uint8[n], n)`` that evicts every cache line of its buffer with ``clflushopt``."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func
    def flush(a: T.handle, n: T.int64):
        T.func_attr({"global_symbol": "flush"})
        data = T.match_buffer(a, (n,), "uint8")
        for i in T.serial((n + T.int64(LINE - 1)) // T.int64(LINE)):
            T.evaluate(T.call_llvm_intrin("void", "llvm.x86.clflushopt", T.address_of(data[i * T.int64(LINE)])))
        T.evaluate(T.call_llvm_intrin("void", "llvm.x86.sse.sfence"))

    target = tvm.target.Target({"kind": "llvm", "mattr": ["+clflushopt"]})
    return tvm.compile(tvm.IRModule({"flush": flush}), target=target)["flush"]


def flush_function(flags: frozenset[str] | None = None) -> str:
    """The name of the flush the time evaluator should call before each repeat in this process: :data:`FLUSH_OPT`
    (registered on first use) where the CPU reports ``clflushopt``, else :data:`TVM_FLUSH`."""
    import tvm

    if "clflushopt" not in (host_flags() if flags is None else flags):
        return TVM_FLUSH
    if tvm.get_global_func(FLUSH_OPT, allow_missing=True) is None:
        kernel = _flush_kernel()

        def flush_all_but_first(*arrays) -> None:
            for array in arrays[1:]:
                size = array.dtype.itemsize
                for extent in array.shape:
                    size *= int(extent)
                if size:
                    kernel(array._create_view((size,), "uint8"), size)

        tvm.register_global_func(FLUSH_OPT, flush_all_but_first)
    return FLUSH_OPT


def _dirty_kernel(threads: int):
    """A parallel kernel ``(a, b)`` over ``threads`` rows of :data:`DIRTY_BYTES` each: ``b = a + 1``, each row on a
    thread of TVM's pool, so every core the kernels run on ends with its caches full of ``b``'s modified lines."""
    import tvm
    from tvm import te
    from tvm.s_tir import Schedule

    n = DIRTY_BYTES // 4
    a = te.placeholder((threads, n), "float32", name="a")
    b = te.compute((threads, n), lambda i, j: a[i, j] + 1.0, name="b")
    sch = Schedule(tvm.IRModule({"main": te.create_prim_func([a, b])}))
    row, col = sch.get_loops(sch.get_sblock("b"))
    sch.parallel(row)
    sch.vectorize(sch.split(col, factors=[None, 16])[1])
    return tvm.compile(sch.mod, target=tvm.target.Target({"kind": "llvm"}))["main"]


def dirty_function(threads: int) -> str:
    """The name of the preprocessing the time evaluator calls before each repeat to leave the caches as a forward
    pass does: :data:`DIRTY`, registered on first use for ``threads`` threads (the kernels' own)."""
    import numpy as np
    import tvm

    if tvm.get_global_func(DIRTY, allow_missing=True) is None:
        kernel = _dirty_kernel(max(1, threads))
        source = tvm.runtime.tensor(np.zeros((max(1, threads), DIRTY_BYTES // 4), "float32"))
        target = tvm.runtime.tensor(np.zeros((max(1, threads), DIRTY_BYTES // 4), "float32"))

        def dirty(*arrays) -> None:  # the kernel's own arguments stay where its last call left them
            kernel(source, target)

        tvm.register_global_func(DIRTY, dirty)
    return DIRTY


def cache_function(state: str, threads: int) -> str:
    """The time evaluator's preprocessing for a cache state of :data:`CACHE_STATES`."""
    if state == "dirty":
        return dirty_function(threads)
    if state == "flushed":
        return flush_function()
    raise ValueError(f"unknown cache state {state!r}; valid: {', '.join(CACHE_STATES)}")


__all__ = ["CACHE_STATES", "DIRTY", "DIRTY_BYTES", "FLUSH_OPT", "TVM_FLUSH", "cache_function", "dirty_function",
           "flush_function"]
