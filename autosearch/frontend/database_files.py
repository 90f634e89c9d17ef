"""TVM's JSONDatabase on disk, read: its two files, opening one with clear errors, and one read as tuning-log contents.

The later stages all read databases (a warm start and known schedules in the search, the cost models' datasets,
export and report), and only export writes one (:mod:`autosearch.deploy.database`); so the reading is not a part of
the last stage. It is the front end's: a database's workloads become tasks as a model's layers do
(:func:`~autosearch.frontend.task.task_from_module`), and its records the log contents of :mod:`autosearch.records`;
every later stage imports the front end, and the top level's shared modules import no stage.
"""

from __future__ import annotations

import json
import math
import os

from autosearch.errors import UserError
from autosearch.records import LogContents, read_log
from autosearch.types import MeasureResult, Record, Status

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
FAILED_RUN_SECS = 1e10  # what MetaSchedule writes for a failed measurement


def json_database(out_dir: str, *, create: bool):
    """TVM's ``JSONDatabase`` on the two files in ``out_dir`` (``create``: they may not exist yet)."""
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    return JSONDatabase(
        path_workload=os.path.join(out_dir, WORKLOAD_FILE),
        path_tuning_record=os.path.join(out_dir, RECORD_FILE),
        allow_missing=create,
    )


def load_database(path: str):
    """Open an existing TVM JSONDatabase directory, with a clear error if it is not one."""
    if not os.path.isdir(path):
        raise UserError(f"database directory not found: {path}")
    missing = [f for f in (WORKLOAD_FILE, RECORD_FILE) if not os.path.isfile(os.path.join(path, f))]
    if missing:
        raise UserError(f"{path} is not a MetaSchedule database: missing {', '.join(missing)}")
    from autosearch.tensor_units.intrinsics import register_for

    try:
        _check_workload_hashes(os.path.join(path, WORKLOAD_FILE))
        with open(os.path.join(path, RECORD_FILE)) as fh:
            register_for(fh.read())  # records on a bf16 unit: TVM looks their intrinsics up as it reads them
        return json_database(path, create=False)
    except UserError:
        raise
    except Exception as exc:  # TVM raises on bad JSON with a long message
        text = [ln for ln in str(exc).splitlines() if ln.strip()]
        raise UserError(f"cannot load the database in {path}: {text[-1][:200] if text else type(exc).__name__} "
                        "(corrupt, or written by another TVM version)") from exc


def _check_workload_hashes(workload_file: str) -> None:
    """A database keys workloads by structural hash, which changes between TVM versions: a stored hash
    that this TVM does not compute for the stored module means the database was written by another
    TVM, and its records would silently never match. Refuse it."""
    from tvm.s_tir.meta_schedule.database import Workload

    with open(workload_file) as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            stored_hash, encoded = json.loads(line)[:2]
            recomputed = str(Workload(Workload.from_json([stored_hash, encoded]).mod).as_json()[0])
            if recomputed != str(stored_hash):
                raise UserError(f"{workload_file}:{lineno}: workload hash {stored_hash} is not what this TVM "
                                f"computes ({recomputed}): the database was written by another TVM version")


def read_database(path: str) -> LogContents:
    """A TVM JSONDatabase (from ``ms.tune_tir`` or from autosearch) as tuning-log contents.

    Records come in the order they were committed (the file's line order, i.e. MetaSchedule's trial
    order), not in TVM's in-memory order, which is sorted by run time.
    """
    from tvm.s_tir.meta_schedule.database import TuningRecord, Workload

    from autosearch.frontend.target import target_to_json
    from autosearch.frontend.task import task_from_module
    from autosearch.tvm_compat import to_plain_json

    load_database(path)  # validates the files (corrupt, other TVM version) with clear errors
    with open(os.path.join(path, WORKLOAD_FILE)) as fh:
        workloads = [Workload.from_json(json.loads(line)) for line in fh if line.strip()]
    out = LogContents(path=path)
    with open(os.path.join(path, RECORD_FILE)) as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    for index, body in rows:
        workload = workloads[int(index)]
        rec = TuningRecord.from_json(body, workload)
        key = str(workload.as_json()[0])
        target = rec.target
        if key not in out.tasks:
            task = task_from_module(workload.mod, target, index=len(out.tasks), name=f"task{len(out.tasks)}")
            out.tasks[key] = task.to_json()
        flops = out.tasks[key]["flops"]
        secs = [float(s) for s in (rec.run_secs or [])]
        ok = bool(secs) and all(math.isfinite(s) and s < FAILED_RUN_SECS for s in secs)
        result = MeasureResult(Status.OK, tuple(secs)) if ok else MeasureResult.failed(
            Status.RUN_ERROR, "failed in the TVM database (run_secs 1e10)")
        trace = to_plain_json(rec.trace.as_json(remove_postproc=False))
        out.records.append(Record(kind="trial", task_key=key, task_name=out.tasks[key]["name"],
                                  target=target_to_json(target), config=None, result=result, flops=flops,
                                  trace=trace, strategy="tvm-database"))
    return out


def read_records(path: str) -> LogContents:
    """Our JSON Lines log or a TVM database directory, whichever ``path`` is."""
    if os.path.isdir(path):
        return read_database(path)
    return read_log(path)
