"""Which machine a result was measured on: a fingerprint stored with every result, compared before mixing."""

from __future__ import annotations

import os
import socket
from typing import Any

from autosearch.frontend.target import cpu_model

IDENTITY = ("cpu_model", "cores", "mcpu", "num_cores")  # what must agree for timings to be compared


def fingerprint(target) -> dict[str, Any]:
    """CPU model, logical cores, the LLVM target (its ``mcpu`` and ``num-cores``), host and versions."""
    import tvm

    from autosearch import __version__
    from autosearch.frontend.target import target_num_cores, target_to_json

    spec = target_to_json(target)
    return {"cpu_model": cpu_model(), "cores": os.cpu_count() or 1, "mcpu": spec.get("mcpu", ""),
            "num_cores": target_num_cores(target), "target": spec, "host": socket.gethostname(),
            "tvm": tvm.__version__, "autosearch": __version__}


UNIT_FLAGS = ("avx512f", "avx512_bf16", "avx512_vnni", "amx_tile")  # the flags a figure is named with


def host_label() -> str:
    """``AMD EPYC (LLVM znver4; avx512f, avx512_bf16, avx512_vnni; no amx_tile), 2 vCPU``: the CPU's model name
    says too little on a VM (an AMD EPYC may be a Zen 3 or a Zen 4), so the LLVM name and the flags that decide
    the lowering (AVX-512, the bf16 dot product, VNNI, AMX) go with every caption."""
    from autosearch.frontend.target import host_target
    from autosearch.tensor_units.cpu import host_flags, target_mcpu

    flags = host_flags()
    have = [f for f in UNIT_FLAGS if f in flags]
    lacks = [f for f in UNIT_FLAGS if f not in flags]
    units = [", ".join(have)] if have else []
    if lacks:
        units.append("no " + ", ".join(lacks))
    return f"{cpu_model()} (LLVM {target_mcpu(host_target()) or '?'}; {'; '.join(units)}), {os.cpu_count()} vCPU"


def identity(info: dict[str, Any]) -> tuple:
    return tuple(info.get(k) for k in IDENTITY)


def describe(info: dict[str, Any]) -> str:
    """``AMD EPYC ..., 2 cores, llvm -mcpu=znver4 (2 threads)``."""
    return (f"{info.get('cpu_model', '?')}, {info.get('cores', '?')} cores, LLVM mcpu={info.get('mcpu') or '?'} "
            f"({info.get('num_cores', '?')} threads)")
