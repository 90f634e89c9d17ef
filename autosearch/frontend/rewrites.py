"""The rewrites every build applies to a scheduled module just before TVM compiles it.

One list, called by each place that compiles a schedule (a trial's kernel, :func:`autosearch.measure.kernels.build`;
the whole model, :func:`autosearch.frontend.lowering.build_module`; the assembly features,
:func:`autosearch.cost_models.asm_features.kernel_assembly`), so that what is timed, what is shipped and what a
cost model reads are one program. Each rewrite leaves the tasks, their workload keys and their loop features as
they are: logs, databases and trained models stay valid when one is added.
"""

from __future__ import annotations


def build_rewrites(mod):
    """``mod`` with its float32 divisions by a weight the kernel only reads made multiplications by the weight's
    reciprocal (:mod:`autosearch.frontend.reciprocal`), then TOPI's constant-matrix chains nested
    (:mod:`autosearch.frontend.const_matrices`)."""
    # imported here, at call time: experiments swap a rewrite out to measure what it buys (experiments/reciprocal.py)
    from autosearch.frontend import const_matrices, reciprocal

    return const_matrices.nest_const_matrices(reciprocal.reciprocal_divisors(mod))


__all__ = ["build_rewrites"]
