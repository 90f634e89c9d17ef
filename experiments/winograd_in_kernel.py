"""Winograd with the kernel transform inside the kernel: is the fp32 F(4x4, 3x3) layer bound by its weight bytes?

The shipped Winograd form (:mod:`autosearch.frontend.winograd`) folds the kernel transform ``G g G^T`` at compile
time, so the batched GEMM of tiny-YOLOv2's 13x13 1024 -> 1024 layer reads 151 MB of transformed weights per call
where the direct convolution reads 37.7 MB. If that traffic bounded the layer, transforming each tile of raw weights
just before the GEMM uses it (once per call, for all 36 transform positions) would read a quarter of the bytes for
about a quarter more arithmetic. This builds the layer's Winograd convolution (NCHW, no epilogue) four ways:

- ``transformed``: the shipped form, its batched GEMM scheduled by MetaSchedule's rules, on the structure of the
  layer's best config in an fp32 quick start on an Intel Xeon (the positions outermost, 128 x 8 output channels by
  16 tiles, 32 input channels per step);
- ``in-kernel``: the raw OIHW weights an input, each (input channel, output channel) tile of ``G g G^T`` computed
  for all 36 positions at the GEMM's first reduction loop (a schedule rule of this script's own on the GEMM);
- ``in-kernel, factored``: the same, as ``(G g)`` then ``. G^T`` (162 multiply-adds per filter instead of 324);
- ``raw copy``: the same loops and the same raw-weight reads, the transform replaced by a copy: the in-kernel form's
  memory traffic without its arithmetic.

The in-kernel forms read ``G`` (6 x 3) from a small input: with TOPI's constant matrices unrolled into the kernel, a
build took over the runner's 60 s. Each in-kernel form gets the same grid of tilings (its best reported); all are
timed in turns, each round in a fresh measuring process, cold (caches flushed before every call, as tuning times)
and warm, outputs checked against the unscheduled kernel; beside them, the time two threads take to read each form's
weights (NumPy's reduction over as many bytes) and each form's batched GEMM in GFLOPS::

    python -m experiments.winograd_in_kernel [--rounds 3]

Writes ``experiments/results/winograd-in-kernel[-OUT].{md,json}``. A few minutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math

from autosearch.tables import fmt, markdown_table
from experiments.lib.io import publish, results_path
from experiments.lib.machine import describe, fingerprint
from experiments.lib.retime import measure_traces, round_robin

LAYER = (1024, 1024, 13)  # input channels, output channels, output size: the configs below are this layer's
RULE = "winograd_gemm_in_kernel"  # the GEMM block's schedule_rule annotation in the in-kernel forms
VARIANTS = ("transformed", "in-kernel", "in-kernel, factored", "raw copy")
# the shipped form: inverse, data pack, their compute locations, then the GEMM's tiles (positions eps and nu, output
# channels, tiles, input channels) and the unroll step; sketches 1 and 2 are MetaSchedule's without a cache write
TRANSFORMED = [((1024, 1), (1, 16), (64, 16), (2, 8), -2, 0, (1, 6, 1, 1), (6, 1, 1, 1), (1, 1, 128, 8), (1, 1, 1, 16),
                (32, 32), 3)]
# the in-kernel forms: inverse, the GEMM's positions (inside the first reduction loop), output channels (two
# parallel halves, the rest in tiles), tiles, input channels, data pack, its locations, the unroll step
IN_KERNEL_CO = ((2, 8, 8, 8), (2, 16, 4, 8))
IN_KERNEL_CI = ((16, 64), (32, 32))
IN_KERNEL_UNROLL = (1, 3)


def _gemm_rule(sch, block):
    """The batched GEMM tiled as MultiLevelTiling tiles it (SSRSRS) but with the transform positions inside the first
    reduction loop, where the kernel transform is computed: each tile of raw weights is read once per call and
    transformed for all 36 positions just before the GEMM uses it. With and without a cache write of the output."""
    out = []
    for cache in (True, False):
        s = sch.copy()
        gemm = s.get_sblock("bgemm")
        pack = s.get_sblock("kernel_pack")
        eps, nu, co, p, ci = s.get_loops(gemm)
        tiles = {}
        for name, loop, n in (("eps", eps, 2), ("nu", nu, 2), ("co", co, 4), ("p", p, 4)):
            tiles[name] = s.split(loop, factors=s.sample_perfect_tile(loop, n=n, max_innermost_factor=64),
                                  preserve_unit_iters=True)
        red = s.split(ci, factors=s.sample_perfect_tile(ci, n=2, max_innermost_factor=64), preserve_unit_iters=True)
        t = tiles
        s.reorder(t["co"][0], t["p"][0], t["co"][1], t["p"][1], red[0], t["eps"][0], t["nu"][0], t["co"][2],
                  t["p"][2], red[1], t["eps"][1], t["nu"][1], t["co"][3], t["p"][3])
        if cache:
            s.reverse_compute_at(s.cache_write(gemm, 0, "global"), t["p"][1], preserve_unit_loops=True)
        s.compute_at(pack, red[0], preserve_unit_loops=True)
        reductions = len(s.get(pack).iter_vars) - 4
        loops = s.get_loops(pack)[-(4 + reductions):]  # eps, nu, ci, co, then the filter taps
        s.reorder(loops[2], loops[0], loops[1], *loops[4:], loops[3])  # output channels innermost: vectorised
        for tap in loops[4:]:
            s.unroll(tap)
        half = [b for b in s.get_child_blocks(s.get_sblock("root")) if s.get(b).name_hint == "kernel_half"]
        if half:
            s.compute_at(half[0], loops[2], preserve_unit_loops=True)
            hl = s.get_loops(half[0])[-5:]  # eps, s, ci, co, r
            s.reorder(hl[2], hl[0], hl[1], hl[4], hl[3])
            s.unroll(hl[4])
        s.unannotate(gemm, "schedule_rule")
        out.append(s)
    return out


def register_rule(target) -> None:
    """The GEMM rule under the name MetaSchedule's ``ApplyCustomRule`` looks up for each of ``target``'s keys."""
    import tvm

    for key in target.keys:
        name = f"s_tir.meta_schedule.{key}.{RULE}"
        if tvm.get_global_func(name, allow_missing=True) is None:
            tvm.register_global_func(name, _gemm_rule)


def build(variant: str, in_ch: int, out_ch: int, size: int):
    """The layer's Winograd convolution (NCHW, 3x3, padding 1) in form ``variant`` as a one-function IRModule."""
    import tvm
    from tvm import te

    from autosearch.frontend.winograd import TILE, winograd_conv

    alpha = TILE + 2
    data = te.placeholder((1, in_ch, size, size), name="data")
    if variant == "transformed":
        kernel = te.placeholder((alpha, alpha, in_ch, out_ch), name="kernel")
        return tvm.IRModule({"main": te.create_prim_func([data, kernel, winograd_conv(data, kernel, [1] * 4, TILE)])})
    weight = te.placeholder((out_ch, in_ch, 3, 3), name="weight")
    g = te.placeholder((alpha, 3), name="G")
    r, s = te.reduce_axis((0, 3), "r_kh"), te.reduce_axis((0, 3), "r_kw")
    attrs = {"schedule_rule": "None", "layout_free_placeholders": [weight]}
    shape = (alpha, alpha, in_ch, out_ch)
    if variant == "in-kernel":
        pack = te.compute(shape, lambda eps, nu, c, o: te.sum(weight[o, c, r, s] * g[eps, r] * g[nu, s], axis=[r, s]),
                          name="kernel_pack", attrs=attrs)
    elif variant == "in-kernel, factored":
        half = te.compute((alpha, 3, in_ch, out_ch),
                          lambda eps, j, c, o: te.sum(g[eps, r] * weight[o, c, r, j], axis=[r]),
                          name="kernel_half", attrs=attrs)
        pack = te.compute(shape, lambda eps, nu, c, o: te.sum(half[eps, s, c, o] * g[nu, s], axis=[s]),
                          name="kernel_pack", attrs={"schedule_rule": "None"})
    elif variant == "raw copy":
        pack = te.compute(shape, lambda eps, nu, c, o: weight[o, c, eps % 3, nu % 3] * g[eps, nu % 3],
                          name="kernel_pack", attrs=attrs)
    else:
        raise ValueError(f"unknown variant {variant!r}")
    out = winograd_conv(data, pack, [1] * 4, TILE)
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([data, weight, g, out])}))
    gemm = sch.get_sblock("bgemm")
    sch.unannotate(gemm, "layout_free_placeholders")  # its kernel is computed here: the raw weights are layout-free
    sch.annotate(gemm, "schedule_rule", RULE)  # the GEMM scheduled by _gemm_rule
    return sch.mod


def configs(variant: str) -> list:
    """The configs a variant is timed at: (sketch, decision values)."""
    if variant == "transformed":
        return [(sketch, values) for values in TRANSFORMED for sketch in (1, 2)]
    inverse, data_pack = ((1024, 1), (1, 16)), ((64, 16), (2, 8))
    return [(1, inverse + ((6, 1), (6, 1), co, (1, 1, 1, 16), ci) + data_pack + (-2, 0, unroll))
            for co, ci, unroll in itertools.product(IN_KERNEL_CO, IN_KERNEL_CI, IN_KERNEL_UNROLL)]


def weight_mb(variant: str, in_ch: int, out_ch: int) -> float:
    """Megabytes of weights one call reads."""
    return (36 if variant == "transformed" else 9) * in_ch * out_ch * 4 / 1e6


def read_gb_per_s(megabytes: float, threads: int = 2, repeats: int = 7) -> float:
    """How fast ``threads`` threads read ``megabytes`` of float32 from memory (NumPy's reduction, each thread a
    share), median of ``repeats``: the weights' stream, timed beside the kernels as a bound on them."""
    import statistics
    import time
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    parts = np.array_split(np.ones(int(megabytes * 1e6) // 4, dtype=np.float32), threads)
    times = []
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(repeats):
            start = time.perf_counter()
            list(pool.map(lambda x: float(np.add.reduce(x)), parts))
            times.append(time.perf_counter() - start)
    return megabytes / 1e3 / statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    from autosearch.frontend.target import parse_target
    from autosearch.frontend.task import task_from_module
    from autosearch.measure.base import EvaluatorConfig
    from autosearch.ranking import scores
    from autosearch.search.space import Config, DecisionSpace
    from experiments.lib.retime import prepared_runner

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--target", default=None)
    p.add_argument("--out", default="")
    a = p.parse_args(argv)
    in_ch, out_ch, size = LAYER
    target = parse_target(a.target)
    register_rule(target)
    info = fingerprint(target)
    tasks = {v: dataclasses.replace(task_from_module(build(v, in_ch, out_ch, size), target, name=v), target=target)
             for v in VARIANTS}
    mods = {}
    for v, task in tasks.items():
        space = DecisionSpace(task.mod, target)
        for i, (sketch, values) in enumerate(configs(v)):
            applied = space.apply(Config(sketch=sketch, values=values))
            if applied.ok:
                mods[(v, i)] = applied.trace_json()
    rows, data = [], {"machine": info, "layer": [in_ch, out_ch, size], "rounds": a.rounds, "variants": {}}
    best: dict[str, dict[str, float]] = {v: {} for v in VARIANTS}
    for state, evaluator in (("cold", EvaluatorConfig()), ("warm", EvaluatorConfig(cache_flush=False))):
        timed = []
        runner = prepared_runner(tasks["transformed"], evaluator=evaluator)
        try:
            for task in list(tasks.values())[1:]:
                if not runner.prepare(task).ok:
                    raise RuntimeError(f"the unscheduled {task.name} failed")
            groups = {v: [k for k in mods if k[0] == v] for v in VARIANTS}
            for r in range(a.rounds):
                if r:
                    runner.refresh()
                for v, key in round_robin(groups, r):
                    timed += zip([key], measure_traces(runner, tasks[v], [mods[key]]))
        finally:
            runner.close()
        per = scores(timed)
        for v in VARIANTS:
            mine = {k: t for k, t in per.items() if k[0] == v}
            best[v][state] = min(mine.values(), default=float("inf")) * 1e3
            data["variants"].setdefault(v, {})[state] = {str(k[1]): t * 1e3 for k, t in mine.items()}
    base = best["transformed"]["cold"]
    gemm_gflop = 2 * 36 * math.ceil(size / 4) ** 2 * in_ch * out_ch / 1e9  # F(4x4): 36 positions, 4x4-output tiles
    bandwidth = read_gb_per_s(weight_mb("transformed", in_ch, out_ch))
    data.update(gemm_gflop=gemm_gflop, read_gb_per_s=bandwidth)
    for v in VARIANTS:
        mb = weight_mb(v, in_ch, out_ch)
        rows.append([v, fmt(mb, 1), fmt(mb / bandwidth, 2), len(configs(v)), fmt(best[v]["cold"], 2),
                     fmt(best[v]["warm"], 2), f"{best[v]['cold'] / base:.2f}x",
                     fmt(gemm_gflop / best[v]["cold"] * 1e3, 0)])
    text = (f"**Winograd F(4x4, 3x3), {in_ch} -> {out_ch} at {size}x{size} (NCHW, no epilogue): the kernel transform "
            f"folded or inside the kernel** ({describe(info)}); `python -m experiments.winograd_in_kernel "
            f"--rounds {a.rounds}`: each form's best of its configs, the median over {a.rounds} rounds (each "
            "a fresh measuring process, the forms taking turns) of its per-round median, outputs checked. Weights' "
            f"stream: the ms two threads take to read the weights at {bandwidth:.1f} GB/s (NumPy's reduction over "
            f"the same bytes, timed here); GEMM GFLOPS: the batched GEMM's {gemm_gflop:.2f} GFLOP over the cold "
            "time (the transforms left out).\n\n"
            + markdown_table(["form", "weights read, MB", "weights' stream ms", "configs", "cold ms", "warm ms",
                              "cold, of transformed", "GEMM GFLOPS"], rows) + "\n")
    publish(results_path("winograd-in-kernel" + (f"-{a.out}" if a.out else "")), data=data, text=text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
