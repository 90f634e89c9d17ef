"""The contract every runner keeps, written once, run for each registered runner (the built-ins ``local`` and
``ray``, and every runner another installed distribution adds, such as examples/autosearch-device-runner), each made
by the registry's factory as ``run --runner NAME`` makes it: real builds and timings of the small conv task, good
kernels and the faulty ones of ``tests/faulty_kernels.py``. What a new runner must pass to mean what the others mean:

- ``prepare`` times the untuned kernel and keeps its output as the task's reference; a task not prepared is refused;
- ``measure`` returns one result per module, in order, with the status the local runner gives it (a kernel that
  kills its process, one that hangs, one with a wrong output, one that fails to build), and the next kernel still
  measures;
- a timed kernel has its repeats (or one timing and a note, when far slower than the best), its build seconds and the
  CPU it ran on; its latencies agree with the local runner's within a factor of 3;
- ``refresh`` gives a fresh measuring process, which gets the task's reference again.
"""

from __future__ import annotations

import numpy as np
import pytest

from autosearch.api import RUNNERS, MeasureOptions, make_runner
from autosearch.measure.queueing import run_delay_seconds
from autosearch.types import Status
from tests.faulty_kernels import FAULTS

# short timings; a hanging kernel is given up after RUN_TIMEOUT seconds (a good one here takes milliseconds)
RUN_TIMEOUT = 3.0
MEASURE = MeasureOptions(repeat=3, min_repeat_ms=5, build_workers=2, run_timeout=RUN_TIMEOUT)
EXAMPLE_PLUG_IN = ("autosearch-device-runner", "device")  # examples/autosearch-device-runner: distribution, runner
GOOD = 3


@pytest.fixture(scope="module")
def good_mods(conv_space):
    return [a.mod for a in conv_space.sample_applied(np.random.default_rng(3), GOOD)]


@pytest.fixture(scope="module")
def local_reference(conv_task):
    """The local runner every runner's latencies are compared with (itself too: two processes agree)."""
    with make_runner("local", conv_task.target, MEASURE) as local:
        assert local.prepare(conv_task).ok
        yield local


@pytest.fixture(scope="module", params=sorted(RUNNERS))
def prepared(request, conv_task):
    """(each registered runner, made by the registry as ``run --runner NAME`` makes it; its conv task's baseline)."""
    with make_runner(request.param, conv_task.target, MEASURE, seed=0) as made:
        yield made, made.prepare(conv_task)


@pytest.fixture
def runner(prepared):
    return prepared[0]


def test_every_registered_runner_is_in_the_contract_suite(request) -> None:
    names = {item.callspec.params["prepared"] for item in request.session.items
             if item.module is request.module and hasattr(item, "callspec") and "prepared" in item.callspec.params}
    assert {"local", "ray"} <= set(RUNNERS) and names == set(RUNNERS)


def test_the_example_plug_in_package_is_registered_and_in_the_contract_suite() -> None:
    """examples/autosearch-device-runner, a runner in a distribution of its own: once installed, the registry has it
    and the suite runs it like a built-in, its option checked against its table."""
    from autosearch.api import runner_option_table
    from autosearch.errors import UserError
    from tests.conftest import example_plug_in

    distribution, name = EXAMPLE_PLUG_IN
    dist = example_plug_in(distribution)
    assert RUNNERS[name] == "autosearch_device_runner.runner:create"
    assert [ep.name for ep in dist.entry_points if ep.group == "autosearch.runners"] == [name]
    assert list(runner_option_table(name)) == ["threads"]
    with pytest.raises(UserError, match="option threads='two' of runner 'device' must be int"):
        make_runner(name, None, MEASURE, options={"threads": "two"})


def test_prepare_times_the_untuned_kernel(prepared) -> None:
    _, baseline = prepared
    assert baseline.ok and baseline.status == Status.OK, baseline.error
    assert baseline.median > 0 and baseline.build_secs > 0


def test_each_kernel_gets_its_status_in_order_and_the_next_still_measures(runner, conv_task, good_mods) -> None:
    mods = [good_mods[0], FAULTS["crash"], good_mods[1], FAULTS["hang"], FAULTS["wrong"], FAULTS["build"],
            good_mods[2]]
    results = runner.measure(conv_task, mods)
    statuses = [r.status for r in results]
    assert statuses == [Status.OK, Status.WORKER_CRASHED, Status.OK, Status.RUN_TIMEOUT, Status.WRONG_RESULT,
                        Status.BUILD_ERROR, Status.OK], [r.error for r in results]
    assert "differ" in results[4].error and results[3].run_secs >= RUN_TIMEOUT * 0.95
    for result in (results[0], results[2], results[6]):
        # timed `repeat` times, or once with a note when far slower than the best so far (slow_factor)
        assert len(result.latencies) == MEASURE.repeat or "timed once" in result.error
        assert result.build_secs > 0 and result.measured_on and result.worker
        if len(result.latencies) == MEASURE.repeat and run_delay_seconds() is not None:
            assert 0 <= result.waited < 1  # its threads' wait for a core, counted where Linux counts it


def test_latencies_agree_with_the_local_runners(runner, conv_task, good_mods, local_reference) -> None:
    """The machine is shared: the best median per kernel over interleaved rounds, the geometric mean of the ratios
    within a factor of 3 (more rounds only if not)."""
    theirs = np.array([r.median for r in runner.measure(conv_task, good_mods)])
    local = np.array([r.median for r in local_reference.measure(conv_task, good_mods)])
    for _ in range(2):
        ratio = float(np.exp(np.mean(np.log(theirs / local))))
        if 1 / 3 < ratio < 3:
            break
        theirs = np.minimum(theirs, [r.median for r in runner.measure(conv_task, good_mods)])
        local = np.minimum(local, [r.median for r in local_reference.measure(conv_task, good_mods)])
    ratio = float(np.exp(np.mean(np.log(theirs / local))))
    assert 1 / 3 < ratio < 3, (theirs, local)


def test_a_task_not_prepared_is_refused(runner, small_model, good_mods) -> None:
    other = next(t for t in small_model.tasks if "conv" not in t.name)
    with pytest.raises(RuntimeError, match="prepare"):
        runner.measure(other, good_mods[:1])


def test_refresh_gives_a_fresh_process_that_gets_the_reference_again(runner, conv_task, good_mods) -> None:
    [before] = runner.measure(conv_task, good_mods[:1])
    runner.refresh()
    [after] = runner.measure(conv_task, good_mods[:1])
    assert before.ok and after.ok, (before.error, after.error)
    assert after.worker != before.worker  # a new process (the same device)
