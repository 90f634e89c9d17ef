"""Build and measure real kernels; injected faults get the right status and the next kernel measures."""

from __future__ import annotations

import os

import numpy as np
import pytest

from autosearch.measure.base import EvaluatorConfig
from autosearch.types import Status


@pytest.fixture(scope="module")
def runner(conv_task):
    from autosearch.measure.local import LocalRunner

    r = LocalRunner(target=conv_task.target, evaluator=EvaluatorConfig(repeat=3, min_repeat_ms=5),
                    build_workers=2, build_timeout=60, run_timeout=8)
    baseline = r.prepare(conv_task)
    assert baseline.ok, baseline.error
    yield r
    r.close()


def test_baseline_is_the_unscheduled_kernel(runner, conv_task):
    secs = runner.baseline_secs(conv_task)
    assert secs is not None and 0 < secs < 5


def test_random_configs_build_and_compute_the_right_output(runner, conv_task, conv_space):
    import tvm

    rng = np.random.default_rng(11)
    applied = [a for a in (conv_space.apply(conv_space.sample(rng)) for _ in range(6)) if a.ok]
    assert len(applied) >= 4
    results = runner.measure(conv_task, [a.mod for a in applied])
    assert [r.status for r in results] == [Status.OK] * len(applied), [r.error for r in results]
    assert len(results[0].latencies) == 3  # no best yet: timed in full
    for r in results:
        assert len(r.latencies) == 3 or (len(r.latencies) == 1 and "timed once" in r.error)
        assert r.median > 0 and r.cv >= 0
        assert r.build_secs > 0 and r.run_secs > 0 and r.worker
        # the measuring process names the CPU that timed it, as LLVM names this one
        assert r.measured_on == str(tvm.target.codegen.llvm_get_system_cpu())
        assert r.gflops(conv_task.flops) > 0
    # a tuned schedule beats the unscheduled loop nest
    assert min(r.median for r in results) < runner.baseline_secs(conv_task)


def test_injected_faults_get_their_status_and_the_next_kernel_still_measures(runner, conv_task, conv_space):
    from tests.faulty_kernels import FAULTS

    good = conv_space.apply(conv_space.default(0)).mod
    mods = [FAULTS["crash"], good, FAULTS["hang"], good, FAULTS["wrong"], FAULTS["build"], good]
    results = runner.measure(conv_task, mods)
    statuses = [r.status for r in results]
    assert statuses == [Status.WORKER_CRASHED, Status.OK, Status.RUN_TIMEOUT, Status.OK, Status.WRONG_RESULT,
                        Status.BUILD_ERROR, Status.OK], [r.error for r in results]
    assert "signal" in results[0].error
    assert "differ" in results[4].error
    assert all(r.median == float("inf") for r, s in zip(results, statuses) if s is not Status.OK)


def test_build_timeout_kills_only_that_build(conv_task, conv_space):
    import tvm

    from autosearch.measure.local import BuildPool

    mod_json = tvm.ir.save_json(conv_space.apply(conv_space.default(0)).mod)
    pool = BuildPool(target=conv_task.target, workers=1, timeout=0.05)
    try:
        [built] = pool.build([mod_json])  # 50 ms: too short for a compile (the worker's start-up is not counted)
        assert built.failure is not None and built.failure.status in (Status.BUILD_TIMEOUT, Status.BUILD_ERROR)
        pool.timeout = 120
        [ok] = pool.build([mod_json])
        assert ok.failure is None and ok.artifact
    finally:
        pool.close()
    assert not os.path.exists(pool.scratch_dir)  # what the killed build left in its temporary directory went too


def test_a_worker_that_crashes_or_hangs_is_replaced(target):
    from autosearch.measure.worker import Worker
    from tests.faulty_kernels import artifact, run_in

    crash, hang = artifact("crash", target), artifact("hang", target)
    w = Worker(name="t")
    try:
        assert w.call("ping", timeout=60).kind == "ok"
        assert run_in(w, crash, timeout=30).kind == "crashed"
        assert w.call("ping", timeout=60).kind == "ok"  # replaced
        assert run_in(w, hang, timeout=1).kind == "timeout"
        reply = w.call("ping", timeout=60)
        assert reply.kind == "ok" and w.restarts == 2
    finally:
        w.close()


def test_a_candidate_far_slower_than_the_best_is_timed_once(runner, conv_task, conv_space):
    runner.refresh()  # the best so far is this test's, not that of the tests before it on this runner
    rng = np.random.default_rng(5)
    fast = [a.mod for a in (conv_space.apply(conv_space.sample(rng)) for _ in range(6)) if a.ok]
    measured = runner.measure(conv_task, fast)
    best = min(r.median for r in measured if r.ok)
    [slow] = runner.measure(conv_task, [conv_task.mod])  # the unscheduled loop nest
    assert slow.ok
    if slow.median > 5 * best:
        assert len(slow.latencies) == 1 and "timed once" in slow.error
    else:  # this machine ran the naive kernel unusually fast; then it is timed in full
        assert len(slow.latencies) == 3


def test_slow_shortcut_judges_the_kernel_not_the_copy_of_its_arguments(target):
    """A fast kernel with a big argument (a 64 MB weight) is timed in full: copying the arguments in and
    out takes far longer than the kernel, and must not make it look "far slower than the best"."""
    import tvm
    from tvm import te

    from autosearch.measure.kernels import KernelRunner, build

    big = te.placeholder((1 << 24,), name="big")  # 64 MB of float32
    out = te.compute((16,), lambda i: big[i] * 2.0, name="out")
    mod = tvm.IRModule({"main": te.create_prim_func([big, out])})
    artifact, _ = build(tvm.ir.save_json(mod), dict(target.export()))
    args = [((1 << 24,), "float32"), ((16,), "float32")]
    runner = KernelRunner("cpu")
    evaluator = {"repeat": 3, "min_repeat_ms": 0, "cache_flush": False}
    runner.reference("big", artifact, args, 0, evaluator)
    timed = runner.run("big", artifact, args, 0, {**evaluator, "slow_after": 2e-3})
    assert "wrong_result" not in timed
    assert len(timed["latencies"]) == 3 and "note" not in timed
    assert timed["median"] < 2e-3


def test_a_slow_untuned_kernel_is_timed_by_the_call_that_computed_its_reference(conv_task):
    """Slower than ``slow_after``, the unscheduled kernel runs once: that call gives the reference and the baseline's
    one timing. Faster, it is timed with the evaluator's repeats after it; the reference is the same either way."""
    import tvm

    from autosearch.frontend.target import target_to_json
    from autosearch.measure.kernels import KernelRunner, build

    artifact, _ = build(tvm.ir.save_json(conv_task.mod), target_to_json(conv_task.target))
    runner, used = KernelRunner("cpu"), []
    load = runner._load

    class Spied:  # the loaded module, every use of it recorded
        def __init__(self, module) -> None:
            self.module = module

        def __getitem__(self, name):
            func = self.module[name]
            return lambda *args: (used.append(name), func(*args))[1]

        def __getattr__(self, name):
            used.append(name)
            return getattr(self.module, name)

    runner._load = lambda art: (Spied(load(art)[0]), None)
    evaluator = {"repeat": 3, "min_repeat_ms": 0, "cache_flush": False}
    slow = runner.reference("slow", artifact, conv_task.args, 0, {**evaluator, "slow_after": 1e-9})
    assert used == ["main"] and slow["note"] == "timed once: slow untuned kernel" and len(slow["latencies"]) == 1
    assert slow["median"] == slow["latencies"][0] > 0
    used.clear()
    fast = runner.reference("fast", artifact, conv_task.args, 0, {**evaluator, "slow_after": 1e3})
    assert used == ["main", "time_evaluator"] and len(fast["latencies"]) == 3 and "note" not in fast
    assert fast["reference"] == slow["reference"]


def test_running_kernels_leaves_no_files_behind(target, tmp_path, monkeypatch):
    """Each library is loaded from a temporary directory that is gone before the kernel runs."""
    import tempfile

    import tvm
    from tvm import te

    from autosearch.measure.kernels import KernelRunner, build

    a = te.placeholder((64,), name="a")
    out = te.compute((64,), lambda i: a[i] + 1.0, name="out")
    artifact, _ = build(tvm.ir.save_json(tvm.IRModule({"main": te.create_prim_func([a, out])})), dict(target.export()))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    runner = KernelRunner("cpu")
    args = [((64,), "float32"), ((64,), "float32")]
    evaluator = {"repeat": 1, "min_repeat_ms": 0, "cache_flush": False}
    runner.reference("k", artifact, args, 0, evaluator)
    timed = runner.run("k", artifact, args, 0, evaluator)
    assert len(timed["latencies"]) == 1
    assert list(tmp_path.iterdir()) == []


def test_a_calls_timeout_does_not_count_the_workers_start_up():
    """A fresh worker imports TVM (seconds) before it answers: the first call's own timeout starts after that."""
    import io

    from autosearch.measure.worker import Worker

    buf = io.BytesIO()
    np.savez(buf, a0=np.zeros(4, dtype="float32"))
    w = Worker(name="t")
    try:
        reply = w.call("set_reference", "k", buf.getvalue(), timeout=0.5)  # shorter than importing TVM
        assert reply.kind == "ok", reply.error
        assert w.restarts == 0
    finally:
        w.close()


def test_kernels_built_once_are_loaded_from_the_build_cache_by_a_later_runner(tmp_path, conv_task, conv_space):
    """A dataset's re-timing runs in another runner, hours after the trials: with ``build_cache`` it loads each
    kernel the trials built (no build, same checked output and timing path); another target builds its own."""
    import dataclasses

    from autosearch.frontend.target import parse_target
    from autosearch.measure.local import LocalRunner

    rng = np.random.default_rng(11)
    mods = [a.mod for a in (conv_space.apply(conv_space.sample(rng)) for _ in range(6)) if a.ok][:3]
    cache = str(tmp_path / "builds")
    with LocalRunner(target=conv_task.target, build_cache=cache, build_workers=1) as first:
        assert first.prepare(conv_task).ok
        built = first.measure(conv_task, mods)
    assert all(r.ok and r.build_secs > 0 for r in built)
    with LocalRunner(target=conv_task.target, build_cache=cache, build_workers=1) as later:
        assert later.prepare(conv_task).ok  # the unscheduled module: built by the first runner too
        again = later.measure(conv_task, mods)
        assert later.builder.disk_hits == 1 + len(mods)
    assert all(r.ok and r.build_secs == 0.0 for r in again)
    other = dataclasses.replace(conv_task, target=parse_target("llvm -mcpu=x86-64 -num-cores 2"))
    with LocalRunner(target=other.target, build_cache=cache, build_workers=1) as elsewhere:
        assert elsewhere.prepare(other).ok
        [r] = elsewhere.measure(other, mods[:1])
        assert r.ok and r.build_secs > 0 and elsewhere.builder.disk_hits == 0


def test_prepare_many_builds_beside_the_caller_and_times_only_after_every_build(small_model):
    """The untuned modules build while ``meanwhile`` runs here; no reference is computed (nothing timed) until
    every build has ended; each task then has its baseline and reference as ``prepare`` gives them."""
    from autosearch.measure.local import LocalRunner

    tasks = list(small_model.tasks)
    r = LocalRunner(target=tasks[0].target, evaluator=EvaluatorConfig(repeat=3, min_repeat_ms=5), build_workers=2)
    futures, seen = [], {}
    submit, reference = r.builder.submit, r.device.reference
    r.builder.submit = lambda mods: futures.extend(submit(mods)) or list(futures)

    def spied_reference(*args, **kwargs):
        seen.setdefault("builds done at each timing", []).append(all(f.done() for f in futures))
        return reference(*args, **kwargs)

    r.device.reference = spied_reference
    try:
        results = r.prepare_many(tasks, meanwhile=lambda: seen.update(building=not all(f.done() for f in futures)))
        assert len(futures) == len(tasks) and seen["building"]  # meanwhile() ran while modules were building
        assert seen["builds done at each timing"] == [True] * len(tasks)
        assert [x.status for x in results] == [Status.OK] * len(tasks), [x.error for x in results]
        for task, result in zip(tasks, results):
            assert r.baseline_secs(task) == result.median
        with pytest.raises(RuntimeError, match="space"):  # meanwhile() failing: its error, no build left running
            r.prepare_many(tasks, meanwhile=lambda: (_ for _ in ()).throw(RuntimeError("space")))
        assert all(f.done() for f in futures)
    finally:
        r.close()


def test_a_measuring_process_grown_past_its_memory_limit_is_replaced_between_kernels(conv_task, conv_space):
    """A dataset times thousands of kernels in one process, which keeps some memory of each: past the limit the
    process is replaced after a kernel's reply, and the next kernel is checked against the reference again."""
    from autosearch.measure.local import LocalRunner

    rng = np.random.default_rng(5)
    mods = [a.mod for a in (conv_space.apply(conv_space.sample(rng)) for _ in range(6)) if a.ok][:3]
    with LocalRunner(target=conv_task.target, evaluator=EvaluatorConfig(repeat=2, min_repeat_ms=1),
                     build_workers=1) as r:
        assert r.prepare(conv_task).ok
        first = r.measure(conv_task, mods[:1])
        assert first[0].ok and r.device.recycled == 0  # far under the default limit
        r.device.max_rss_bytes = 1  # every process is over this one: each kernel is timed by a fresh process
        results = r.measure(conv_task, mods)
        assert [x.status for x in results] == [Status.OK] * len(mods), [x.error for x in results]
        assert r.device.recycled == len(mods)
        assert len({x.worker for x in results}) == len(mods)  # each by another process


def test_cold_timing_fits_its_repeats_to_the_budget():
    """One call per repeat (the default): a fast kernel gets every repeat, a slow one as many as fit in the budget,
    never fewer than MIN_REPEATS; a warm evaluator (``min_repeat_ms`` > 0) keeps its own."""
    from autosearch.measure.kernels import MIN_REPEATS, fitted

    cold = EvaluatorConfig().to_json()
    assert cold["min_repeat_ms"] == 0 and cold["repeat"] == 30
    assert fitted(cold, 1e-4)["repeat"] == 30  # 30 calls of 0.1 ms fit in 0.2 s
    assert fitted(cold, 0.02)["repeat"] == 10  # 0.2 s / 20 ms
    assert fitted(cold, 1.0)["repeat"] == MIN_REPEATS
    assert fitted(cold, 0.01, flush=0.01)["repeat"] == 10  # the flush before each repeat counts: 0.2 s / 20 ms
    assert fitted(cold, 1e-4, flush=0.05)["repeat"] == MIN_REPEATS
    warm = EvaluatorConfig(repeat=5, min_repeat_ms=20).to_json()
    assert fitted(warm, 1.0) == warm


def test_the_flush_a_repeat_costs_is_measured_on_the_kernels_arguments():
    """What the budget counts per repeat besides the call: TVM's flush of every argument but the first, timed on
    the arguments themselves (once per task: its candidates flush the same arguments), so a kernel with large
    weights gets fewer repeats than one with small ones; nothing when the evaluator does not flush."""
    import tvm

    from autosearch.measure.kernels import KernelRunner

    runner, dev = KernelRunner(), tvm.cpu()
    small = [tvm.runtime.tensor(np.ones(n, "float32"), dev) for n in (1 << 20, 1 << 10, 1 << 10)]
    large = [tvm.runtime.tensor(np.ones(n, "float32"), dev) for n in (1 << 10, 1 << 23, 1 << 10)]
    cold = EvaluatorConfig().to_json()
    assert 0 < min(runner._flush_secs(f"small{i}", small, cold) for i in range(3)) < min(
        runner._flush_secs(f"large{i}", large, cold) for i in range(3))
    assert runner._flush_secs("large0", small, cold) == runner._flush_secs("large0", large, cold)  # once a task
    assert runner._flush_secs("x", large, EvaluatorConfig(cache_flush=False).to_json()) == 0.0
    assert runner._flush_secs("y", large, EvaluatorConfig(repeat=5, min_repeat_ms=20).to_json()) == 0.0


def test_a_cold_timing_measures_every_call_with_the_weights_flushed(conv_task, conv_space):
    """The default evaluator times one call per repeat: the kernel is timed as many times as its budget allows,
    each latency one call's (no repeat averages several)."""
    from autosearch.measure.local import LocalRunner

    cold = LocalRunner(target=conv_task.target, evaluator=EvaluatorConfig(), build_workers=1, build_timeout=60,
                       run_timeout=8)
    try:
        assert cold.prepare(conv_task).ok
        [applied] = conv_space.sample_applied(np.random.default_rng(3), 1)
        [result] = cold.measure(conv_task, [applied.mod])
    finally:
        cold.close()
    assert result.ok, result.error
    from autosearch.measure.kernels import MIN_REPEATS

    assert MIN_REPEATS <= len(result.latencies) <= 30 and min(result.latencies) > 0


def test_the_clflushopt_flush_evicts_what_tvms_flush_evicts():
    """Where the CPU has ``clflushopt`` the time evaluator calls autosearch's flush: registered under its name, it
    leaves every argument but the first as it was (a flush changes no data), and a kernel then reads its weights
    as slowly as after TVM's own flush (both cold), while a warm read is faster."""
    import time

    import tvm

    from autosearch.measure.flush import FLUSH_OPT, TVM_FLUSH, flush_function
    from autosearch.tensor_units.cpu import host_flags

    assert flush_function(frozenset()) == TVM_FLUSH  # no clflushopt: TVM's
    if "clflushopt" not in host_flags():
        pytest.skip("this CPU has no clflushopt: its runs use TVM's flush, tested above")
    assert flush_function() == FLUSH_OPT
    dev = tvm.cpu()
    # 128 KiB, copied into another: both stay in a core's L2 between two copies on every CPU seen (512 KiB on Zen 3),
    # so a warm copy reads L2 and a cold one memory. 16 MiB twice filled a Zen 4's 32 MiB L3 (the warm copy ran
    # slower than the cold one); at 1 MiB a warm copy read L3, and on a Zen 3 VM memory streamed a cold one nearly
    # as fast (1.13x)
    first, data = np.arange(16, dtype="float32"), np.random.default_rng(0).random(1 << 15).astype("float32")
    arrays = [tvm.runtime.tensor(first, dev), tvm.runtime.tensor(data, dev)]
    tvm.get_global_func(FLUSH_OPT)(*arrays)
    np.testing.assert_array_equal(arrays[1].numpy(), data)
    np.testing.assert_array_equal(arrays[0].numpy(), first)

    out = tvm.runtime.empty((1 << 15,), "float32", dev)

    # the three reads taken in turns, each the fastest of 50: a noisy neighbour (on a VM the other vCPU may share the
    # core's caches) then slows all three alike instead of whichever happened to run during it
    best: dict[str | None, float] = dict.fromkeys((None, TVM_FLUSH, FLUSH_OPT), float("inf"))
    for _ in range(50):
        for flush in best:
            arrays[1].copyto(out)
            if flush:
                tvm.get_global_func(flush)(*arrays)
            start = time.perf_counter()
            arrays[1].copyto(out)
            best[flush] = min(best[flush], time.perf_counter() - start)
    warm, cold_tvm, cold_opt = best[None], best[TVM_FLUSH], best[FLUSH_OPT]
    assert cold_opt > 1.2 * warm and cold_tvm > 1.2 * warm
    assert 0.6 < cold_opt / cold_tvm < 1.6


def test_the_dirty_cache_state_leaves_the_arguments_as_they_were_and_a_warm_read_slower():
    """``cache_state="dirty"``: before each repeat the pool's threads write more than a core's L2 of their own, as
    the layers before a kernel do in a forward pass: the kernel's arguments keep their values, and data a warm read
    found in a core's cache is read more slowly after it (taken in turns with a warm read, each the fastest of 50)."""
    import time

    import tvm

    from autosearch.measure.flush import DIRTY, cache_function

    assert cache_function("dirty", 1) == DIRTY and cache_function("flushed", 1) != DIRTY
    with pytest.raises(ValueError, match="unknown cache state"):
        cache_function("lukewarm", 1)
    dev = tvm.cpu()
    first, data = np.arange(16, dtype="float32"), np.random.default_rng(0).random(1 << 15).astype("float32")
    arrays = [tvm.runtime.tensor(first, dev), tvm.runtime.tensor(data, dev)]
    dirty = tvm.get_global_func(DIRTY)
    dirty(*arrays)
    np.testing.assert_array_equal(arrays[1].numpy(), data)
    np.testing.assert_array_equal(arrays[0].numpy(), first)
    out = tvm.runtime.empty((1 << 15,), "float32", dev)  # 128 KiB: in a core's L2 between two copies when warm
    best = {"warm": float("inf"), "dirty": float("inf")}
    for _ in range(50):
        for state in best:
            arrays[1].copyto(out)
            if state == "dirty":
                dirty(*arrays)
            start = time.perf_counter()
            arrays[1].copyto(out)
            best[state] = min(best[state], time.perf_counter() - start)
    assert best["dirty"] > 1.2 * best["warm"], best


def test_a_run_timed_with_dirty_caches_says_so_in_its_log(tmp_path):
    import autosearch
    from autosearch.errors import UserError
    from autosearch.records import read_log
    from tests.conftest import small_conv_run

    with pytest.raises(UserError, match="unknown cache state 'lukewarm'"):
        autosearch.MeasureOptions(cache_state="lukewarm")
    _, path = small_conv_run(tmp_path, trials=2, measure=autosearch.MeasureOptions(repeat=5, cache_state="dirty"))
    log = read_log(path)
    assert [run["cache_state"] for run in log.runs] == ["dirty"]
    trials = log.trials()
    assert len(trials) == 2 and all(r.result.ok and len(r.result.latencies) == 5 for r in trials)


def test_a_kernel_built_ahead_is_taken_with_its_build_seconds_and_nothing_is_timed_while_one_builds(conv_task,
                                                                                                   conv_space):
    """``prefetch`` builds on workers a batch leaves idle: the batch that asks for the module takes that build (its
    seconds, not a cache hit's 0) without building again, and a batch measured while another module builds ahead
    waits for it before timing anything."""
    from autosearch.measure.local import LocalRunner

    rng = np.random.default_rng(5)
    mods = [a.mod for a in (conv_space.apply(conv_space.sample(rng)) for _ in range(8)) if a.ok][:2]
    with LocalRunner(target=conv_task.target, evaluator=EvaluatorConfig(repeat=3, min_repeat_ms=5),
                     build_workers=2) as r:
        assert r.prepare(conv_task).ok
        assert [r.spare_builds(n) for n in (0, 1, 2, 3)] == [0, 1, 0, 1]
        builds, done_at_timing = [], []
        build_one, run = r.builder._build_one, r.device.run
        r.builder._build_one = lambda mod_json: builds.append(mod_json) or build_one(mod_json)
        def spied_run(*args, **kwargs):
            done_at_timing.append(all(f.done() for f in ahead))
            return run(*args, **kwargs)

        r.device.run = spied_run
        r.prefetch([mods[1]])
        ahead = list(r.builder._ahead.values())
        assert len(ahead) == 1 and len(builds) <= 1
        [first] = r.measure(conv_task, [mods[0]])  # timed only once the kernel built ahead has ended
        assert done_at_timing == [True] and first.ok
        [second] = r.measure(conv_task, [mods[1]])
        assert second.ok and second.build_secs > 0
        assert len(builds) == 2  # the module built ahead was not built again


def test_a_measuring_process_given_one_core_times_every_thread_on_it(target, tmp_path):
    """A measuring process held to one core with two threads (as a Ray device is given its cores, or a pinned
    worker's child) runs a parallel kernel's threads on that core alone: TVM's pool, left to itself, bound its
    second thread to another core and widened the first to every core, so the kernel was timed against whatever
    ran there."""
    import json

    import tvm

    from autosearch.frontend.target import target_to_json
    from autosearch.measure.kernels import build
    from tests.conftest import parallel_kernel_mod, run_python

    if (os.cpu_count() or 1) < 2:
        pytest.skip("this machine has one core: no other core for a thread to go to")
    artifact, _ = build(tvm.ir.save_json(parallel_kernel_mod()), target_to_json(target))
    path = tmp_path / "kernel.bin"
    path.write_bytes(artifact)
    core = os.cpu_count() - 1  # the machine's last core, never the first TVM binds to by itself
    script = (
        "import glob, json, os, sys\n"
        f"os.sched_setaffinity(0, {{{core}}})\n"
        "from autosearch.measure.kernels import KernelRunner\n"
        f"artifact = open({str(path)!r}, 'rb').read()\n"
        "args = [((256, 1024), 'float32'), ((256, 1024), 'float32')]\n"
        "evaluator = {'repeat': 3, 'min_repeat_ms': 5, 'cache_flush': False}\n"
        "runner = KernelRunner('cpu')\n"
        "runner.reference('k', artifact, args, 0, evaluator)\n"
        "timed = runner.run('k', artifact, args, 0, evaluator)\n"
        "cpus = [open(t + '/status').read().split('Cpus_allowed_list:')[1].split()[0]\n"
        "        for t in glob.glob('/proc/self/task/*')]\n"
        "print(json.dumps({'cpus': sorted(set(cpus)), 'ok': 'median' in timed}))\n")
    seen = json.loads(run_python(script, env={**os.environ, "TVM_NUM_THREADS": "2"}, timeout=120)
                      .strip().splitlines()[-1])
    assert seen == {"cpus": [str(core)], "ok": True}
