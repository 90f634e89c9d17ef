"""The CPU's tensor units: bf16 convolutions on AMX tiles, or on the AVX512-BF16 dot product where the CPU has no
AMX, as a per-layer lowering alternative.

- :mod:`.cpu`: which units the host has (the kernel's flags, since a hypervisor may report a CPU model whose
  LLVM name lacks them), the LLVM features a target needs to use them, and the unit a target lowers bf16 to;
- :mod:`.amx`: the process's permission for AMX tile state and the tile-multiply tensor intrinsics;
- :mod:`.dpbf16`: the ``vdpbf16ps`` tensor intrinsic, a micro-kernel in LLVM IR that TVM imports;
- :mod:`.block`: the accumulator block of a flattened convolution both units' intrinsics describe;
- :mod:`.intrinsics`: the intrinsics a trace names, registered before TVM reads it;
- :mod:`.conv`: a conv2d lowered to a bf16 implicit GEMM over the flattened, padded input, with its weights
  packed at compile time in the layout the tile multiply and the dot product read;
- :mod:`.sketch`: the design space of such a task: accumulator shapes and loop splits as decisions, the inner
  GEMM tensorised onto the unit's intrinsic;
- :mod:`.softmax`: a softmax's rows with their reductions split across the vector lanes (the fp32 vector units,
  used by every precision and by :mod:`.attention_sketch`'s fused attention).
"""
