"""Assembly features: a hand-written loop nest, real builds of a scalar and a vector matmul, the dataset."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from autosearch.cost_models.asm_features import (
    FEATURE_NAMES,
    WIDTH,
    assembly_features,
    classify,
    is_x86,
    kernel_assembly,
    parse,
)
from autosearch.cost_models.evaluate import pairwise_accuracy
from autosearch.cost_models.features import build_dataset
from autosearch.errors import UserError
from tests.cost_models.conftest import first_records
from tests.cost_models.test_loop_features import _matmul, _schedule, held_out_pairwise

x86_host = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="builds for an x86-64 host")

# an outer loop around two inner loops; the second one holds the compute: 2 zmm FMAs (32 lanes), a
# broadcast, a spill reload and a vinsertps per iteration
NEST = """\
main:                                   # @main
\t.cfi_startproc
\tpushq\t%rbp
.LBB0_1:                                # =>This Loop Header: Depth=1
\txorl\t%eax, %eax
.LBB0_2:                                #   Parent Loop BB0_1 Depth=2
\tvmovss\t(%rsi,%rax,4), %xmm0
\tvfmadd231ss\t(%rdx,%rax,4), %xmm0, %xmm1
\tincq\t%rax
\tcmpq\t$64, %rax
\tjne\t.LBB0_2
.LBB0_3:
\tvbroadcastss\t(%rdi,%rcx,4), %zmm2
\tvfmadd231ps\t(%rsi), %zmm2, %zmm3
\tvfmadd231ps\t64(%rsi), %zmm2, %zmm4 {%k1}
\tvmovups\t-128(%rsp), %zmm5
\tvinsertps\t$16, (%rdx), %xmm6, %xmm6
\taddq\t$1, %rcx
\tjne\t.LBB0_3
\tvmovups\t%zmm3, (%r8)
\tdecq\t%r9
\tjne\t.LBB0_1
\tretq
"""


def test_parse_finds_loops_from_backward_branches():
    instructions, loops = parse(NEST)
    assert len(instructions) == 18 and instructions[0] == "pushq\t%rbp"
    assert sorted(loops) == [(1, 16), (2, 6), (7, 13)]  # (first, last) instruction of each loop


def test_classify_reads_att_operands():
    assert classify("vfmadd231ps\t(%rsi), %zmm2, %zmm3") == {"n": 1, "fma_zmm": 1, "load": 1}
    assert classify("vmovups\t%zmm3, (%r8)") == {"n": 1, "store": 1}
    assert classify("vmovups\t-128(%rsp), %zmm5") == {"n": 1, "load": 1, "stack": 1}
    assert classify("vfmadd231ss\t(%rdx,%rax,4), %xmm0, %xmm1")["fma_s"] == 1
    assert classify("vaddps\t%ymm1, %ymm2, %ymm3") == {"n": 1, "fp_arith": 1}
    assert classify("vinsertps\t$16, (%rdx), %xmm6, %xmm6") == {"n": 1, "shuffle": 1, "load": 1}
    assert classify("leaq\t8(%rsp), %rax") == {"n": 1}  # an address, not a memory access


def test_hot_loop_is_the_one_with_most_fma_lanes():
    f = assembly_features(NEST)
    assert set(f) == set(FEATURE_NAMES) and len(FEATURE_NAMES) == WIDTH
    assert f["hot0_fma_lanes"] == 32 and f["hot1_fma_lanes"] == 1
    assert f["hot0_instructions"] == 7 and f["hot0_zmm_fma_share"] == 1.0 and f["hot1_scalar_fma_share"] == 1.0
    assert f["hot0_stack_per_fma"] == 0.5 and f["hot0_shuffles_per_fma"] == 0.5 and f["hot0_broadcasts_per_fma"] == 0.5
    # 5 loads / 3 per cycle is the bottleneck (7 instructions / 6, 2 FMAs / 2): 32 lanes in 5/3 cycles
    assert f["hot0_lanes_per_cycle"] == pytest.approx(32 / (5 / 3))
    assert f["hot0_share_of_lanes"] == pytest.approx(32 / 33)
    assert (f["loops"], f["innermost_loops"], f["fma_loops"]) == (3, 2, 2)


@x86_host
def test_vector_matmul_compiles_to_wider_fmas_than_a_scalar_one(target):
    """Real LLVM builds: j vectorised by 16 gives zmm/ymm FMAs with several lanes per instruction; the
    same matmul with k innermost (unit-stride only in A) and no vector loop stays far behind."""
    import tvm

    vector = assembly_features(kernel_assembly(_schedule(_matmul(), vector=16), target))
    scalar = assembly_features(kernel_assembly(_schedule(_matmul(), vector=1, parallel=False), target))
    assert vector["hot0_fma_lanes"] >= 8 and vector["hot0_scalar_fma_share"] == 0
    assert vector["hot0_lanes_per_cycle"] > 2 * scalar["hot0_lanes_per_cycle"], (vector, scalar)
    assert not is_x86(tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu"}))


@x86_host
def test_the_assembly_is_of_the_kernel_a_trial_times(target, conv_task, conv_space):
    """The program read is the one the measurement builds (``autosearch.measure.kernels.as_compiled``): a division
    by a weight compiled as a multiplication by its reciprocal, and a schedule that rewrites its weights' layout
    without that rewrite, which the model runs once at load, untimed."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def normalise(x: T.Buffer((64, 64), "float32"), scale: T.Buffer((64,), "float32"),
                  y: T.Buffer((64, 64), "float32")):
        for i, c in T.grid(64, 64):
            with T.sblock("norm"):
                vi, vc = T.axis.remap("SS", [i, c])
                y[vi, vc] = x[vi, vc] / scale[vc]

    def multiplications(text: str) -> int:
        return sum(1 for i in parse(text)[0] if i.split()[0] in ("vmulps", "vmulss", "mulps", "mulss"))

    mod = tvm.IRModule({"main": normalise})
    built = tvm.compile(mod, target=target)
    plain = (built.mod.imports[0] if built.mod.imports else built.mod).inspect_source("asm")
    assert multiplications(plain) == 0  # TVM's own build divides every element
    assert multiplications(kernel_assembly(mod, target)) > 0  # the trial's: by the reciprocal of each weight

    from tests.measure.test_prepack import _prepacked

    applied = _prepacked(conv_space, np.random.default_rng(3))
    built = tvm.compile(applied.mod, target=conv_task.target)
    whole = (built.mod.imports[0] if built.mod.imports else built.mod).inspect_source("asm")
    text = kernel_assembly(applied.mod, conv_task.target)
    assert len(parse(text)[1]) < len(parse(whole)[1])  # the weights' copy loops are not in the kernel timed
    assert "prepack" not in text


def test_other_isas_are_refused_with_a_clear_error():
    import tvm

    from autosearch.cost_models.asm_features import asm_features

    arm = tvm.target.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu"})
    with pytest.raises(UserError, match="x86-64"):
        asm_features([_schedule(_matmul())], arm)


@x86_host
def test_dataset_asm_features(contents, dataset):
    from autosearch.cost_models.loop_features import WIDTH as LOOP_WIDTH

    X = dataset.X("asm")
    assert X.shape == (160, WIDTH) and np.isfinite(X).all()
    for g in range(4):  # compiled code tells most configs of a task apart
        assert len({r.tobytes() for r in X[dataset.groups == g]}) >= 30
    assert dataset.X("loop+asm").shape == (160, LOOP_WIDTH + WIDTH)
    few = build_dataset([first_records(contents)], kinds=("asm",))  # featurised here, not read from a store
    assert 0 < few.asm_secs_per_record < 5


@x86_host
def test_assembly_adds_to_loop_features_on_held_out_tasks(dataset):
    """Leave one task out on the committed dataset: XGBoost on loop+asm ranks held-out tasks better
    than on loop alone (on YOLO tasks: docs/results.md, Loop and assembly features)."""
    result = {kind: held_out_pairwise(dataset, f"xgb@{kind}") for kind in ("loop", "loop+asm")}
    assert result["loop+asm"] > result["loop"] + 0.02, result


@x86_host
def test_guided_search_scores_configs_on_assembly_features(contents, task_spaces):
    """The scorer path (``space.apply`` of a config) builds the same code as replaying the logged trace,
    and a scorer on ``loop+asm`` learns from measured configs and ranks the others (on the dataset's first
    task, a 1x1 conv2d: the cheapest of its tasks to build, about a sixth of the costliest's build time; the
    scorer learns from the task's own records, so no task is held out here)."""
    from autosearch.cost_models.asm_features import asm_vector
    from autosearch.cost_models.features import TaskFeaturizer
    from autosearch.cost_models.guidance import ModelScorer
    from autosearch.search.cost_model import make_cost_model

    task, space = next(iter(task_spaces.values()))
    assert task.name.startswith("fused_conv2d8_")
    records = [r for r in contents.trials(task.workload_key) if r.ok]
    applied = [(r, space.apply(r.config)) for r in records[:6]]
    pairs = [(r, a) for r, a in applied if a.ok][:3]
    assert pairs
    feat = TaskFeaturizer(task)
    from_trace = feat.asm([feat.schedule_from_trace(r.trace) for r, _ in pairs])
    for (_, a), v in zip(pairs, from_trace):
        np.testing.assert_array_equal(asm_vector(kernel_assembly(a.mod, task.target)), v)

    scorer = ModelScorer(make_cost_model("xgb@loop+asm", seed=0), space, task, seed=0, features="tvm")
    train, test = records[:20], records[20:]
    scorer.update([r.config for r in train], [r.result for r in train])
    scores = scorer.score([r.config for r in test])
    assert scorer.fitted and scorer.stats.featurised == len(records) and np.isfinite(scores).all()
    assert pairwise_accuracy(np.array([1 / r.latency for r in test]), scores) > 0.55
