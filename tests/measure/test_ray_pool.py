"""The Ray device pool on real Ray clusters (loopback only), measuring real kernels of the small conv task.

Every cluster here is started by the tests and stopped by them: an embedded single-node Ray per pool,
and a two-node cluster of ``ray start --block`` processes (stopped by signalling those processes,
never with ``ray stop``, which would also stop other people's Ray on this machine).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

# Token auth for every cluster of this module, from the environment (nothing written to ~/.ray). Ray reads
# the mode when it is imported, so this comes first.
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
os.environ["RAY_AUTH_MODE"] = "token"
if "ray" in sys.modules:  # imported by an earlier test module: make it re-read the mode
    from ray._raylet import Config

    Config.initialize("")
ray = pytest.importorskip("ray")

from autosearch.errors import UserError  # noqa: E402
from autosearch.measure.base import EvaluatorConfig  # noqa: E402
from autosearch.types import Status  # noqa: E402
from tests.conftest import processes_left  # noqa: E402
from tests.measure.ray_faults import inject, misreport  # noqa: E402

EVALUATOR = EvaluatorConfig(repeat=3, min_repeat_ms=5)
STORE = 200 * 1024 * 1024  # bytes of object store per node: kernels are ~100 KB
# `ray start` without Ray's rewrite of 127.0.0.1 to the external address (see ray_cluster.keep_loopback)
RAY_START = ("import sys, ray._private.services as s; s.resolve_ip_for_localhost = lambda h: h; "
             "from ray.scripts.scripts import main; sys.argv[0] = 'ray'; main()")


@pytest.fixture
def ray_tmp():
    """A short private Ray temp dir (socket paths must stay under ~100 characters)."""
    path = tempfile.mkdtemp(prefix="asray-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _pool(target, ray_tmp, **kw):
    from autosearch.measure.ray_pool import RayRunner

    kw.setdefault("evaluator", EVALUATOR)
    kw.setdefault("run_timeout", 8)
    init = {"_temp_dir": ray_tmp, "object_store_memory": STORE} if kw.get("address") is None else {}
    return RayRunner(target=target, ray_init_kwargs=init, **kw)


def _listening_hosts(root_pids: list[int]) -> set[str]:
    """Addresses the TCP servers of these processes and their descendants listen on."""
    import psutil

    pids = set()
    for pid in root_pids:
        proc = psutil.Process(pid)
        pids |= {proc.pid} | {c.pid for c in proc.children(recursive=True)}
    return {c.laddr.ip for c in psutil.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.pid in pids}


def _is_loopback(host: str) -> bool:
    return host in ("127.0.0.1", "::1", "::ffff:127.0.0.1")


def _left_behind(ray_tmp: str) -> list[int]:
    """Processes still writing into a Ray session's logs under ``ray_tmp`` a few seconds after its pool closed (Ray's
    workers, and what they started: fork servers, their forked workers)."""
    def writes_there(pid: str) -> bool:
        try:
            return os.readlink(f"/proc/{pid}/fd/1").startswith(ray_tmp)
        except OSError:
            return False

    return processes_left(writes_there)


def _good_mods(space, n: int, seed: int) -> list:
    return [a.mod for a in space.sample_applied(np.random.default_rng(seed), n)]


# ---------------------------------------------------------------------------------------------- 1
def test_the_embedded_pool_stays_on_loopback_and_measures_on_this_machines_cores(conv_task, conv_space, ray_tmp):
    """Ray's own part of the embedded pool; what every runner keeps (each kernel's status, latencies as the local
    runner's, a refresh that gets the reference again) is the contract suite's (tests/measure/test_runner_contract.py),
    which runs this runner as ``run --runner ray`` makes it."""
    [good] = _good_mods(conv_space, 1, seed=3)
    with _pool(conv_task.target, ray_tmp, build_workers=2) as pool:
        nodes = ray.nodes()
        assert [n["NodeManagerAddress"] for n in nodes] == ["127.0.0.1"]  # loopback, not the LAN address
        assert nodes[0]["Resources"].get(pool.key) == 1 and pool.key.startswith("cpu-")
        [info] = pool.fleet.infos  # the device measures on cores of this machine's process tree
        assert info["measuring_cores"] and set(info["measuring_cores"]) <= os.sched_getaffinity(0)
        hosts = _listening_hosts([os.getpid()])  # the embedded Ray's servers are children of this process
        assert hosts and all(_is_loopback(h) for h in hosts), hosts
        baseline = pool.prepare(conv_task)
        assert baseline.ok and pool.baseline_secs(conv_task) == baseline.median
        [there] = pool.measure(conv_task, [good])
        assert there.ok and f"{pool.key}#0" in there.worker, there.error
        assert there.measured_on == baseline.measured_on != ""  # the actor's CPU is this one
        pool.refresh()
        [again] = pool.measure(conv_task, [good])
        assert again.ok and again.worker.rsplit(":", 1)[0] == there.worker.rsplit(":", 1)[0]
        assert again.worker != there.worker  # same device, new process id
    assert not ray.is_initialized()  # the embedded Ray is gone with the pool


# ---------------------------------------------------------------------------------------------- 3
def test_dead_actors_and_faults_still_give_every_result_once_in_order(conv_task, conv_space, ray_tmp, monkeypatch):
    from tests.faulty_kernels import FAULTS

    good = _good_mods(conv_space, 4, seed=7)
    faults = inject(monkeypatch, {1: "actor_exit_once", 3: "actor_exit", 4: "build_hang"}, conv_task.target)
    with _pool(conv_task.target, ray_tmp, num_devices=2, build_workers=2, build_timeout=6,
               run_timeout=3) as pool:
        assert len(pool.devices) == 2
        assert pool.prepare(conv_task).ok
        mods = [good[0], good[1], good[2], good[3], good[0], FAULTS["crash"]]
        results = pool.measure(conv_task, mods)
        statuses = [r.status for r in results]
        assert statuses == [Status.OK, Status.OK, Status.OK, Status.WORKER_CRASHED, Status.BUILD_TIMEOUT,
                            Status.WORKER_CRASHED], [r.error for r in results]
        assert "died on each of 3 attempts" in results[3].error  # 1 + max_retries, then given up
        assert "signal" in results[5].error  # the kernel killed its worker process, not the actor
        deaths = sum(d.deaths for d in pool.fleet.devices)
        assert deaths == 4  # job 1 once, job 3 three times; each actor was restarted by Ray

        # ray.kill from another thread while the hanging kernel is being timed
        faults.clear()
        mods = [good[0], FAULTS["hang"], good[1], FAULTS["wrong"], good[2]]
        killed: list[int] = []

        def kill_the_hang() -> None:
            end = time.monotonic() + 60
            while time.monotonic() < end and not killed:
                device = pool.in_flight().get(1)
                if device is not None:
                    time.sleep(0.5)  # well inside the 3 s kernel timeout
                    ray.kill(pool.device_handle(device), no_restart=False)
                    killed.append(device)
                time.sleep(0.05)

        thread = threading.Thread(target=kill_the_hang)
        thread.start()
        results = pool.measure(conv_task, mods)
        thread.join()
        assert killed, "the hanging kernel was never seen running"
        statuses = [r.status for r in results]
        assert statuses[:1] + statuses[2:] == [Status.OK, Status.OK, Status.WRONG_RESULT, Status.OK], statuses
        # Ray kills a dead actor's child processes too, in an order of its own: either the actor dies first and the
        # job is retried on the other device, where the hang gets its full timeout, counted from its own start
        # there; or the kernel's worker process dies first and the actor still reports that (worker_crashed,
        # signal 9) before it dies itself. Either way the hang is one failure, in its place, never a result.
        after = sum(d.deaths for d in pool.fleet.devices)
        if statuses[1] == Status.RUN_TIMEOUT:
            assert results[1].run_secs >= 2.9 and after == deaths + 1
        else:
            assert statuses[1] == Status.WORKER_CRASHED and "signal 9" in results[1].error, results[1].error
            assert deaths <= after <= deaths + 1  # counted once a later job finds the actor gone
        assert len(pool.devices) == 2  # both actors are back (or coming back)
    # the hanging kernel's worker ends with its killed actor (it slept out its hour, then a spinning one would spin)
    assert not _left_behind(ray_tmp)


def test_devices_of_one_node_claim_cores_of_their_own_and_a_dead_ones_cores_come_back(tmp_path, monkeypatch,
                                                                                      caplog):
    """A node advertising two units of a key runs two device actors: each measures on a slot of cores no other
    live device of the key holds (both took the node's first cores before); a third, with no slot left, shares
    the first and says so; a slot held by a process that ended is free again."""
    from autosearch.measure.ray_device import claim_cores

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {4, 5, 6, 7, 9})  # this process's cores
    first, cores_a = claim_cores("cpu-znver4-2", 2, slots_dir=str(tmp_path))
    second, cores_b = claim_cores("cpu-znver4-2", 2, slots_dir=str(tmp_path))
    assert (cores_a, cores_b) == ([4, 5], [6, 7])  # five cores hold two slots of two
    other, cores_c = claim_cores("cpu-znver4-1", 1, slots_dir=str(tmp_path))  # another key's slots are its own
    assert other is not None and cores_c == [4]
    third, cores_d = claim_cores("cpu-znver4-2", 2, slots_dir=str(tmp_path))
    assert third is None and cores_d == [4, 5] and "every slot" in caplog.text
    first.close()  # the first device's process ended: its lock with it
    again, cores_e = claim_cores("cpu-znver4-2", 2, slots_dir=str(tmp_path))
    assert again is not None and cores_e == [4, 5]
    for fh in (second, other, again):
        fh.close()
    blocked = tmp_path / "a-file"  # where no lock directory can be made: the first cores, and a warning
    blocked.write_text("")
    assert claim_cores("cpu-znver4-2", 2, slots_dir=str(blocked / "slots")) == (None, [4, 5])
    assert "cannot claim cores" in caplog.text


# ---------------------------------------------------------------------------------------------- 4
def test_devices_that_differ_are_refused_unless_allowed(conv_task, ray_tmp, monkeypatch):
    misreport(monkeypatch, {1: {"cpu_model": "Fake CPU 9000"}})
    with pytest.raises(UserError, match=r"differ .*cpu_model: .*Fake CPU 9000.*allow_mixed"):
        _pool(conv_task.target, ray_tmp, num_devices=2)
    assert not ray.is_initialized()  # the refused pool cleaned up after itself
    with _pool(conv_task.target, ray_tmp, num_devices=2, allow_mixed=True) as pool:
        assert sorted(d["cpu_model"] == "Fake CPU 9000" for d in pool.devices) == [False, True]


def test_cuda_target_without_cuda_tvm_says_so_before_starting_ray(ray_tmp):
    import tvm

    assert not tvm.runtime.enabled("cuda")  # the PyPI wheel
    with pytest.raises(UserError, match=r"no CUDA runtime.*USE_CUDA"):
        _pool(tvm.target.Target({"kind": "cuda"}), ray_tmp)
    assert not ray.is_initialized()


# ---------------------------------------------------------------------------------------------- 2 and 5
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_start(log_path: str, *args: str) -> subprocess.Popen:
    with open(log_path, "w") as log:
        cmd = [sys.executable, "-c", RAY_START, "start", "--block", "--node-ip-address", "127.0.0.1",
               "--disable-usage-stats", "--object-store-memory", str(STORE), *args]
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_started(proc: subprocess.Popen, log_path: str, timeout: float = 90) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with open(log_path) as fh:
            if "Ray runtime started" in fh.read():
                return
        if proc.poll() is not None:
            break
        time.sleep(0.3)
    with open(log_path) as fh:
        raise RuntimeError(f"ray start did not come up:\n{fh.read()[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM makes `ray start --block` stop the processes it started; SIGKILL its group if it hangs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def two_nodes():
    """A head without the test keys and a second node with ``cpu-testkey-1`` and a (logical) test GPU."""
    tmp = tempfile.mkdtemp(prefix="asrc-", dir="/tmp")
    port = _free_port()
    procs = []
    try:
        head_log, worker_log = os.path.join(tmp, "head.log"), os.path.join(tmp, "worker.log")
        procs.append(_ray_start(head_log, "--head", "--port", str(port), "--temp-dir", tmp, "--num-cpus", "1",
                                "--include-dashboard", "false",
                                "--resources", json.dumps({"cpu-headkey-1": 1})))
        _wait_started(procs[0], head_log)
        procs.append(_ray_start(worker_log, "--address", f"127.0.0.1:{port}", "--num-cpus", "1",
                                "--num-gpus", "1",
                                "--resources", json.dumps({"cpu-testkey-1": 1, "cuda-testgpu": 1})))
        _wait_started(procs[1], worker_log)
        hosts = _listening_hosts([p.pid for p in procs])
        assert hosts and all(_is_loopback(h) for h in hosts), hosts
        yield f"127.0.0.1:{port}"
    finally:
        for proc in reversed(procs):
            _stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


def test_a_joined_cluster_routes_the_key_only_to_the_node_that_has_it(two_nodes, conv_task, conv_space):
    with _pool(conv_task.target, None, address=two_nodes, device_key="cpu-testkey-1",
               build_workers=2) as pool:
        nodes = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
        assert len(nodes) == 2 and {n["NodeManagerAddress"] for n in nodes.values()} == {"127.0.0.1"}
        [keyed] = [nid for nid, n in nodes.items() if "cpu-testkey-1" in n["Resources"]]
        assert [d["node_id"] for d in pool.devices] == [keyed]
        assert pool.prepare(conv_task).ok
        results = pool.measure(conv_task, _good_mods(conv_space, 2, seed=5))
        assert [r.status for r in results] == [Status.OK, Status.OK], [r.error for r in results]
        assert all(keyed[:12] in r.worker for r in results)  # answered by the keyed node's actor
    assert not ray.is_initialized()  # the driver disconnected; the cluster itself is the fixture's


def test_cuda_jobs_go_to_the_gpu_node_whose_tvm_says_it_has_no_cuda(two_nodes):
    import tvm

    from autosearch.measure.ray_cluster import keep_loopback

    with keep_loopback():
        ray.init(address=two_nodes, log_to_driver=False)  # the pool reuses this connection
    try:
        [gpu_node] = [n["NodeID"] for n in ray.nodes() if n["Alive"] and "cuda-testgpu" in n["Resources"]]
        with pytest.raises(UserError, match=r"no CUDA runtime") as err:
            _pool(tvm.target.Target({"kind": "cuda"}), None, address=two_nodes, device_key="cuda-testgpu")
        # said once, naming the node that advertises the key (the head has neither the key nor a GPU)
        assert err.value.args[0].count("(node ") == 1 and f"(node {gpu_node[:12]})" in err.value.args[0]
        assert ray.is_initialized()  # a connection the pool did not make is left alone
    finally:
        ray.shutdown()
