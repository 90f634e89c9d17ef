"""Spreading a study's tasks over a Ray cluster: one task per machine at a time, results back to one directory.

Every node that should take part advertises the device key of this machine's target as a Ray resource with one
unit (``ray start --resources '{"cpu-znver4-2": 1}'``, as for ``run --runner ray``), so a node runs one task at a
time and nothing else of the study measures beside it. A task travels as the configuration plus the task's files
already in the results directory (so the node skips finished runs and rounds), runs there as ``study.py --task``
in a scratch directory (tuning runs, then its re-timing, on that node), and its files come back when it ends: new
run results and rounds are added, none already here is overwritten. A node lost mid-task loses that task's
unfinished work only; the next sitting does it again. Every machine needs the same environment and this
repository at the same path (README, "Measuring on several machines").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

from experiments.lib.io import ROOT


def task_files(root: str, slug: str) -> dict[str, bytes]:
    """One task's files in a results directory, by relative path: the task, its runs' results and errors
    (``runs/TASK/METHOD/s<SEED>.json|.error``, not the runs' work directories) and its re-timing rounds."""
    wanted = [os.path.join("tasks", f"{slug}.json")]
    runs = os.path.join(root, "runs", slug)
    for method in sorted(os.listdir(runs)) if os.path.isdir(runs) else []:
        folder = os.path.join(runs, method)
        wanted += [os.path.join("runs", slug, method, f) for f in sorted(os.listdir(folder))
                   if f.endswith((".json", ".error")) and os.path.isfile(os.path.join(folder, f))]
    rounds = os.path.join(root, "retime", slug)
    wanted += [os.path.join("retime", slug, f) for f in sorted(os.listdir(rounds))] if os.path.isdir(rounds) else []
    out: dict[str, bytes] = {}
    for rel in wanted:
        path = os.path.join(root, rel)
        if os.path.isfile(path):
            with open(path, "rb") as fh:
                out[rel] = fh.read()
    return out


def add_files(root: str, files: dict[str, bytes]) -> int:
    """Write the files that are new here (an ``.error`` is always refreshed); returns how many were written."""
    written = 0
    for rel, data in files.items():
        path = os.path.join(root, rel)
        if os.path.exists(path) and not rel.endswith(".error"):
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
        written += 1
    return written


def task_on_node(config_text: str, name: str, spec: str, slug: str, files: dict[str, bytes],
                 retry_failed: bool) -> dict:
    """Runs on a node: the study for one task in a scratch directory; returns its files and how it ended."""
    work = tempfile.mkdtemp(prefix="study-")
    try:
        config, results = os.path.join(work, f"{name}.toml"), os.path.join(work, "results")
        with open(config, "w") as fh:
            fh.write(config_text)
        add_files(results, files)
        cmd = [sys.executable, "-m", "experiments.study", config, "--results", results,
               "--task", spec, *(["--retry-failed"] if retry_failed else [])]
        env = {**os.environ, "PYTHONPATH": ROOT}
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
        return {"files": task_files(results, slug), "returncode": proc.returncode,
                "tail": (proc.stdout[-1500:] + proc.stderr[-1500:]).strip()}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def sit_on_ray(config, store, address: str, tasks, *, retry_failed: bool = False) -> Iterator[str]:
    """Submit every task to the cluster at ``address`` (``local``: a private one-node cluster on this machine, to
    try it out), write back each task's files as it ends; yields one line per task."""
    import ray

    from autosearch.errors import UserError
    from autosearch.frontend.target import parse_target
    from autosearch.measure.ray_cluster import connect, disconnect, first_line
    from autosearch.measure.ray_device import device_key

    key = device_key(parse_target(None))
    with open(config.path) as fh:
        config_text = fh.read()
    connected = connect(None if address == "local" else address, key=key, num_devices=None, init_kwargs={})
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get(key, 0) >= 1]
        if not nodes:
            raise UserError(f"no node of the cluster at {address} advertises the resource {key!r}: start its "
                            f"machines with ray start ... --resources '{{\"{key}\": 1}}'")
        remote = ray.remote(task_on_node).options(num_cpus=0, resources={key: 1}, max_retries=0,
                                                  runtime_env={"env_vars": {"PYTHONPATH": ROOT}})
        refs = {remote.remote(config_text, config.name, str(spec), spec.slug, task_files(store.root, spec.slug),
                              retry_failed): spec for spec in tasks}
        yield f"[ray] {len(refs)} task(s) submitted to nodes with resource {key}"
        while refs:
            [ready], _ = ray.wait(list(refs), num_returns=1)
            spec = refs.pop(ready)
            try:
                reply = ray.get(ready)
            except Exception as exc:  # a node or the task died: its unfinished work is lost, the rest goes on
                yield f"[ray] {spec}: {first_line(exc)}"
                continue
            written = add_files(store.root, reply["files"])
            yield f"[ray] {spec}: exit code {reply['returncode']}, {written} new file(s)" + \
                (f"\n{reply['tail']}" if reply["returncode"] else "")
    finally:
        if connected:
            disconnect()
