"""Which tensor units the host CPU has, and the LLVM features that let TVM's code generator use them.

Under KVM the CPU model the hypervisor reports decides LLVM's name for the host: a Xeon with AMX can be
reported as a model whose LLVM name (e.g. ``rocketlake``) has neither AMX nor AVX512-BF16, and code built for
that name never uses them; and the other way round, a name can imply units the guest does not have. The kernel's
own flags (``/proc/cpuinfo``) say what the CPU really executes, so the host target adds them as ``mattr`` and
switches off the ones the name implies and the kernel does not report.
"""

from __future__ import annotations

from collections.abc import Iterable

# /proc/cpuinfo flag -> LLVM target feature (the units and dot products autosearch can lower to)
FLAG_FEATURES = {
    "avx512_bf16": "+avx512bf16",
    "avx512_fp16": "+avx512fp16",
    "avx512_vnni": "+avx512vnni",
    "avx_vnni": "+avxvnni",
    "amx_tile": "+amx-tile",
    "amx_bf16": "+amx-bf16",
    "amx_int8": "+amx-int8",
}
AMX_BF16 = ("+amx-tile", "+amx-bf16")  # what a target needs for the bf16 tile multiply
AVX512_BF16 = ("+avx512bf16",)


def host_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU flags the kernel reports (empty where there is no ``/proc/cpuinfo``)."""
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def features_for(flags: Iterable[str]) -> list[str]:
    """The LLVM ``mattr`` entries for the tensor units among ``flags``, in a fixed order."""
    present = set(flags)
    return [feature for flag, feature in FLAG_FEATURES.items() if flag in present]


def hidden_features(implied: Iterable[str], flags: Iterable[str]) -> list[str]:
    """The LLVM ``mattr`` entries that switch off the units LLVM's name for the CPU implies (``implied``: LLVM's
    feature names, unsigned) and the kernel does not report in ``flags``, in a fixed order.

    A hypervisor can hide units the other way too: a VM on an Emerald Rapids host was named ``emeraldrapids`` by
    LLVM, which implies AMX and AVX512-BF16, while its kernel reported neither; code built for the name alone may
    use instructions the guest was not given."""
    present, implied = set(flags), set(implied)
    return [f"-{feature[1:]}" for flag, feature in FLAG_FEATURES.items()
            if feature[1:] in implied and flag not in present]


def target_features(target) -> frozenset[str]:
    """The ``mattr`` entries of a TVM target."""
    return frozenset(str(f) for f in (dict(target.export()).get("mattr") or ()))


def has_amx_bf16(target) -> bool:
    """Whether code for ``target`` may use the AMX bf16 tile multiply."""
    return target.kind.name == "llvm" and set(AMX_BF16) <= target_features(target)


def has_avx512_bf16(target) -> bool:
    """Whether code for ``target`` may use the AVX512-BF16 dot product (``vdpbf16ps``)."""
    return target.kind.name == "llvm" and set(AVX512_BF16) <= target_features(target)


def bf16_unit(target) -> str | None:
    """The unit autosearch lowers bf16 convolutions to on ``target``: AMX-BF16 where it has AMX tiles (they
    multiply many times more per instruction), else AVX512-BF16 where it has the dot product, else None."""
    if has_amx_bf16(target):
        return "AMX-BF16"
    return "AVX512-BF16" if has_avx512_bf16(target) else None


def target_mcpu(target) -> str:
    """The LLVM CPU name of a target (its ``mcpu``; "" where it names none)."""
    return str(dict(target.export()).get("mcpu", "") or "")


def family_of_mcpu(mcpu: str) -> str:
    """The CPU family an LLVM CPU name belongs to, as far as schedules and their features care: ``AMD`` (znver*),
    ``Intel`` (the other x86 names LLVM knows), ``unknown`` for none."""
    if mcpu.startswith("znver") or mcpu in ("btver2", "bdver4"):
        return "AMD"
    return "Intel" if mcpu else "unknown"


def bf16_doubles_fp32(target) -> bool:
    """Whether ``target``'s bf16 unit multiplies at least twice as fast as its fp32 FMAs: AMX's tiles do many
    times over; the AVX512-BF16 dot product (two products per fp32 lane) does on AMD's Zen cores, where it issues at
    the FMA's rate, and not on Intel's, where it issues at half of it (docs/results.md: a microbenchmark of
    ``vdpbf16ps``), so that there a bf16 layer is at best as fast as in fp32."""
    if has_amx_bf16(target):
        return True
    return has_avx512_bf16(target) and family_of_mcpu(target_mcpu(target)) == "AMD"


def units(target) -> list[str]:
    """Human-readable names of the bf16 units a target may use (for messages and run headers)."""
    features = target_features(target) if target.kind.name == "llvm" else frozenset()
    out = []
    if set(AMX_BF16) <= features:
        out.append("AMX-BF16")
    if set(AVX512_BF16) <= features:
        out.append("AVX512-BF16")
    return out


__all__ = ["AMX_BF16", "AVX512_BF16", "FLAG_FEATURES", "bf16_doubles_fp32", "bf16_unit", "features_for",
           "family_of_mcpu", "has_amx_bf16", "hidden_features", "has_avx512_bf16", "host_flags", "target_features",
           "target_mcpu", "units"]
