"""The CPU cache flush before each cold repeat: ``clflushopt`` where the CPU has it, TVM's own flush elsewhere.

A cold timing (:class:`~autosearch.measure.base.EvaluatorConfig`) evicts a kernel's weights and outputs before
every call, as the layers before it do inside the model. TVM's ``cache_flush_cpu_non_first_arg`` evicts them one
cache line at a time with ``clflush``, which waits for each line: on a 2-vCPU Xeon VM it took 0.33 s for a
Winograd layer's 151 MB of transformed weights, ten times the kernel, and most of a run's measuring time.
``clflushopt`` evicts the same lines without waiting for each (an ``sfence`` after the last orders them all): 6 ms
there, and a read after either flush is equally slow, so the kernel meets its data as cold. Its flush is a TVM
kernel built here for the host, registered under :data:`FLUSH_OPT` with TVM's calling convention (every argument
but the first), so the time evaluator calls it by name like TVM's own.
"""

from __future__ import annotations

from autosearch.tensor_units.cpu import host_flags

TVM_FLUSH = "cache_flush_cpu_non_first_arg"  # TVM's flush: clflush, one line at a time
FLUSH_OPT = "autosearch.cache_flush_clflushopt"
LINE = 64  # bytes per cache line on every x86-64 CPU with clflushopt


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


__all__ = ["FLUSH_OPT", "TVM_FLUSH", "flush_function"]
