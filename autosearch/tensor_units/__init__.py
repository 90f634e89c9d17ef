"""The CPU's tensor units: bf16 convolutions on AMX tiles, as a per-layer lowering alternative.

- :mod:`.cpu`: which units the host has (the kernel's flags, since a hypervisor may report a CPU model whose
  LLVM name lacks them) and the LLVM features a target needs to use them;
- :mod:`.amx`: the process's permission for AMX tile state and the tile-multiply tensor intrinsics;
- :mod:`.conv`: a conv2d lowered to a bf16 implicit GEMM over the flattened, padded input, with its weights
  packed at compile time in the layout the tile multiply reads;
- :mod:`.sketch`: the design space of such a task: tile counts and loop splits as decisions, the inner GEMM
  tensorised onto the AMX intrinsic.
"""
