"""TVM targets: the host CPU by default, or a JSON dict / tag / short name from the user.

TVM 0.27 refuses the old string form (``"llvm -mcpu=... -num-cores 2"``); we translate it, since
users copy it from older tutorials, and say so when it cannot be translated.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from autosearch.errors import UserError, last_line
from autosearch.tvm_compat import process_cores

SHORT_NAMES = ("llvm", "cuda")
# the per-block limits MetaSchedule's GPU rules read, which TVM's bare "cuda" kind lacks: those of every NVIDIA
# GPU since Fermi (a real GPU's are detected when there is one)
CUDA_LIMITS = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 49152}


def host_cores() -> int:
    """Cores this process may run on (affinity-aware, all of them by default): the cores TVM's pool is bound to
    (:func:`autosearch.tvm_compat.process_cores`)."""
    return len(process_cores())


def host_target(num_cores: int | None = None):
    """The host CPU as TVM detects it, with all its cores (``num-cores``), and in ``mattr`` the tensor units the
    kernel reports on and the ones LLVM's name for it implies and the kernel does not report off
    (:mod:`autosearch.tensor_units.cpu`)."""
    import tvm

    from autosearch.tensor_units.cpu import features_for, hidden_features, host_flags

    detected = dict(tvm.target.Target.from_device("cpu").export())
    cfg = {k: v for k, v in detected.items() if k in ("kind", "mtriple", "mcpu", "mattr") and v}
    cfg["kind"] = "llvm"
    flags = host_flags()
    # the units the kernel reports, which LLVM's name for the CPU may lack (a hypervisor's CPU model)
    extra = [f for f in features_for(flags) if f not in list(cfg.get("mattr") or ())]
    if flags:  # and the units the name implies that the kernel does not report
        implied = tvm.target.codegen.llvm_get_cpu_features(tvm.target.Target(cfg))
        extra += hidden_features((str(f) for f in implied), flags)
    if extra:
        cfg["mattr"] = [*(cfg.get("mattr") or ()), *extra]
    cfg["num-cores"] = int(num_cores or host_cores())
    return tvm.target.Target(cfg)


def cuda_target():
    """This machine's GPU as TVM detects it (arch and limits); without one (compiling for another machine),
    TVM's ``cuda`` kind with :data:`CUDA_LIMITS`, without which MetaSchedule cannot build a GPU design space."""
    import tvm

    if tvm.cuda(0).exist:
        return tvm.target.Target.from_device("cuda")
    return tvm.target.Target({"kind": "cuda", **CUDA_LIMITS})


def _from_legacy_string(spec: str) -> dict[str, Any]:
    """Translate ``"llvm -mcpu=x -num-cores 2"`` into the dict form TVM 0.27 wants."""
    words = shlex.split(spec)
    cfg: dict[str, Any] = {"kind": words[0]}
    i = 1
    while i < len(words):
        word = words[i]
        if not word.startswith("-"):
            raise UserError(f"malformed --target {spec!r}: unexpected word {word!r}")
        key, eq, value = word.lstrip("-").partition("=")
        if not eq:
            if i + 1 < len(words) and not words[i + 1].startswith("-"):
                value = words[i + 1]
                i += 1
            else:
                value = "true"
        if key in ("num-cores", "max-num-threads", "thread-warp-size", "max-threads-per-block"):
            try:
                cfg[key] = int(value)
            except ValueError as exc:
                raise UserError(f"malformed --target {spec!r}: {key} must be an integer") from exc
        elif key in ("mattr", "keys", "libs"):
            cfg[key] = value.split(",")
        else:
            cfg[key] = value
        i += 1
    return cfg


def parse_target(spec: str | None):
    """Turn a user's ``--target`` into a ``tvm.target.Target``; ``None`` means the host CPU.

    Accepted: ``llvm`` (host CPU, all cores), ``cuda``, a JSON dict (``{"kind": "llvm", ...}``),
    a TVM tag (``nvidia/geforce-rtx-3090``), or the legacy string form, which is translated.
    """
    import tvm

    if spec is None or spec.strip() in ("", "llvm", "host", "cpu"):
        return host_target()
    spec = spec.strip()
    try:
        if spec.startswith("{"):
            try:
                cfg = json.loads(spec)
            except json.JSONDecodeError as exc:
                raise UserError(f"malformed --target: not valid JSON ({exc.msg} at char {exc.pos})") from exc
            if not isinstance(cfg, dict) or "kind" not in cfg:
                raise UserError('malformed --target: a JSON target needs a "kind", e.g. {"kind": "llvm"}')
            if cfg["kind"] == "llvm" and "mcpu" not in cfg and "mtriple" not in cfg:
                host = dict(host_target(cfg.get("num-cores")).export())
                cfg = {**{k: host[k] for k in ("mtriple", "mcpu", "mattr") if host.get(k)}, **cfg}
            return tvm.target.Target(cfg)
        if spec == "cuda":
            return cuda_target()
        if " " in spec or spec.startswith("llvm"):
            return tvm.target.Target(_from_legacy_string(spec))
        return tvm.target.Target(spec)  # a TVM tag
    except UserError:
        raise
    except Exception as exc:  # TVM raises ValueError / TVMError with multi-line text
        raise UserError(
            f"malformed --target {spec!r}: {last_line(exc)} (use llvm, cuda, a TVM tag or a JSON dict)"
        ) from exc


def target_to_json(target) -> dict[str, Any]:
    """A plain-JSON description of a target, as written to the tuning log."""
    out: dict[str, Any] = {}
    for key, value in dict(target.export()).items():
        if key == "host" or value is None:
            continue
        if not isinstance(value, str | int | float | bool) and hasattr(value, "__iter__"):
            value = [v if isinstance(v, int | float | bool) else str(v) for v in value]
        if value in ("", []):
            continue
        out[key] = value
    return out


def target_num_cores(target) -> int:
    """Threads to measure with on a CPU target: its ``num-cores``, else the host's cores."""
    value = dict(target.export()).get("num-cores")
    return int(value) if value else host_cores()


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; the platform's processor string elsewhere): named with every
    figure, and compared across Ray workers."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()
