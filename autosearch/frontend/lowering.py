"""The Relax passes that turn a model into tuning tasks, and the build that applies a tuning database.

Tasks and the tuned build must see the very same fused TIR functions, or the database's workload
keys (structural hashes) do not match. Both go through :func:`lowering_passes`:

0. a matmul of a transposed operand larger than the other and the output together (an attention's ``v @ attn^T``)
   computed as the transpose of the other product, so the score matrix is never transposed
   (:func:`matmul_of_a_transpose_transposes_the_smaller`);
1. with ``layout="NHWC"`` (CPU targets), Relax's ``ConvertLayout`` first turns every conv2d into NHWC data /
   OHWI weights; the layout transforms cancel between consecutive layers, one is left at the input and
   where the detection head reshapes. NHWC puts the output channels innermost, so a schedule vectorises
   over them with contiguous weight loads and broadcast inputs; NCHW vectorises over the output width,
   which for stride-2 convolutions means strided input loads (measured: ``experiments/layouts.py``). An ONNX pad is
   written as ``nn.pad`` before (:mod:`autosearch.frontend.padding`), and the transposes ``ConvertLayout`` leaves
   before pads, poolings and concatenations are moved past them after (:mod:`autosearch.frontend.transposes`);
2. with ``fast_math="on"``, TVM's ``FastMathTransform`` (softmax, exp) and a sigmoid on TVM's ``fast_exp``
   (:func:`fast_sigmoid`): the approximations vectorise, libm's ``expf`` does not;
3. TVM's library dispatch and legalisation for the target (LegalizeOps, AnnotateTIROpPattern,
   FoldConstant, FuseOps, FuseTIR; a kernel TVM's pattern analysis calls element-wise though an input is not the
   output's shape nor broadcast to it is called injective: :func:`injective_where_an_input_is_not_broadcast`),
   as ``ms.relax_integration`` does, without the default schedules TVM's
   GPU pipelines end with (dlight's ``ApplyDefaultSchedule``): tasks must reach MetaSchedule unscheduled.
   The tuned build gives them, after the database, to the kernels the database lacks (:func:`apply_database`);
4. winograd for the wide 3x3 stride-1 convolutions (:mod:`autosearch.frontend.winograd`, ``winograd="auto"``; CPU
   targets only; NCHW convolutions, and NHWC ones in fp32), legalised in place of TVM's direct conv2d;
5. ``AttachAttrLayoutFreeBuffers``: the model's weights are constants, so a schedule may choose their
   layout (MetaSchedule's ``RewriteLayout``). This is TVM's own CPU recipe (``cpu_weight_prepack`` of
   ``static_shape_tuning_pipeline``); since our weights are constants, not parameters, the prepacking is
   folded at compile time and the model's interface does not change.

:func:`build_tuned` is ``ms.relax_integration.compile_relax`` with the prepacking steps TVM's recipe
adds after applying the database (``SplitLayoutRewritePreproc``, ``FoldConstant``) and, for GPU targets, the
default schedules; then the target's own dataflow-lowering and finalisation passes.

Before each of Relax's ``FoldConstant`` runs a :class:`autosearch.frontend.fold.ConstantFolder` (the same folding of
the weight transforms, each compiled once): a caller lowering one model several times passes one folder to all
its lowerings (``folder=``).
"""

from __future__ import annotations

import math
from typing import Any

from autosearch.relax_util import ELEMWISE, INJECTIVE, mutate_relax_functions, static_shape

LAYOUTS = ("NCHW", "NHWC")  # concrete conv2d data layouts of a lowering
# run --layout: a concrete layout, or "auto": the model tuned in both, the faster compiled (frontend.alternatives)
LAYOUT_MODES = ("auto", *LAYOUTS)
# run's default: NHWC vectorises most convolutions better, NCHW sometimes wins with its Winograd layers (both
# layouts have them); the library's functions default to NCHW, the model as ONNX gives it
DEFAULT_LAYOUT = "auto"
FAST_MATH_MODES = ("on", "off")
DEFAULT_FAST_MATH = "on"  # ONNX Runtime, the baseline, computes sigmoid and softmax with approximations too
# --precision: fp32 everywhere; bf16 for every NHWC convolution (and matmul: an attention's, a linear layer's) the
# tensor units can compute; auto: where the CPU has them, each such layer tuned both ways and the faster kept
# (autosearch.tensor_units)
PRECISION_MODES = ("auto", "fp32", "bf16")
DEFAULT_PRECISION = "auto"  # OpenVINO's default on CPUs with bf16 units is bf16 too
# the lowering options' values for logs and databases written before the option existed
OLD_LOWERING = {"winograd": "auto", "layout": "NCHW", "fast_math": "off", "precision": "fp32"}
DEFAULT_SCHEDULE = "ApplyDefaultSchedule"  # dlight's pass, the last of TVM's GPU legalisation (none on CPU)


def check_layout(layout: str, *, modes: tuple[str, ...] = LAYOUTS) -> str:
    """``layout`` if it is one of ``modes`` (the concrete layouts a lowering takes; ``LAYOUT_MODES`` where a
    model is imported for tuning), else a one-line error."""
    from autosearch.errors import UserError

    if layout not in modes:
        raise UserError(f"unknown --layout {layout!r}; valid layouts: {', '.join(modes)}")
    return layout


def converts_layout(target, layout: str) -> bool:
    """Whether the lowering rewrites the model's convolutions to ``layout`` (CPU targets only)."""
    return check_layout(layout) != "NCHW" and target.kind.name == "llvm"  # ONNX models come as NCHW


def check_winograd(mode: str) -> str:
    from autosearch.errors import UserError
    from autosearch.frontend.winograd import MODES

    if mode not in MODES:
        raise UserError(f"unknown --winograd mode {mode!r}; valid modes: {', '.join(MODES)}")
    return mode


def winograd_policy(winograd, precision: str | None = None):
    """A WinogradPolicy from a policy or a mode name; ``precision`` (a policy's precision mode) replaces the
    policy's own when given."""
    import dataclasses

    from autosearch.frontend.winograd import WinogradPolicy

    if not isinstance(winograd, WinogradPolicy):
        if winograd != "candidates":
            check_winograd(winograd)
        winograd = WinogradPolicy.of(winograd)
    return winograd if precision is None else dataclasses.replace(winograd, precision=precision)


def check_precision(mode: str) -> str:
    from autosearch.errors import UserError

    if mode not in PRECISION_MODES:
        raise UserError(f"unknown --precision {mode!r}; valid precisions: {', '.join(PRECISION_MODES)}")
    return mode


def resolve_precision(mode: str, target, layout: str) -> tuple[str, str]:
    """(the precision mode a lowering uses, why, in a few words) for ``--precision mode`` on ``target`` with
    ``--layout layout``. bf16 convolutions need a bf16 unit autosearch lowers to (AMX-BF16 tiles, else the
    AVX512-BF16 dot product: :func:`autosearch.tensor_units.cpu.bf16_unit`) and NHWC data (the flattened GEMM
    reads channels innermost): ``auto`` is fp32 without them, ``bf16`` an error."""
    from autosearch.errors import UserError
    from autosearch.tensor_units.cpu import bf16_unit

    check_precision(mode)
    if mode == "fp32":
        return "fp32", "as asked"
    unit = bf16_unit(target)
    if unit is None:
        why = "this CPU has no bf16 unit (AMX-BF16 or AVX512-BF16)"
        if mode == "bf16":
            raise UserError(f"--precision bf16: {why}; use --precision fp32 or auto")
        return "fp32", why
    if layout == "NCHW":
        if mode == "bf16":
            raise UserError("--precision bf16 needs NHWC convolutions: use --layout NHWC or auto")
        return "fp32", "bf16 convolutions are NHWC and --layout is NCHW"
    layers = "convolution, matmul and attention"
    winograd = " (the wide 3x3 convolutions also as bf16 Winograd)" if unit == "AVX512-BF16" else ""
    return mode, (f"every eligible NHWC {layers} in bf16 on {unit}" if mode == "bf16"
                  else f"each eligible NHWC {layers} tuned in fp32 and in bf16 on {unit}{winograd}, the faster kept")


def check_fast_math(mode: str) -> str:
    from autosearch.errors import UserError

    if mode not in FAST_MATH_MODES:
        raise UserError(f"unknown --fast-math mode {mode!r}; valid modes: {', '.join(FAST_MATH_MODES)}")
    return mode


def fast_sigmoid(x):
    """sigmoid(x) = 1 / (1 + exp(-x)) with TVM's vectorisable ``fast_exp`` (a degree-5 polynomial after
    range reduction, max relative error ~1e-7 for float32). TVM's own ``sigmoid`` intrinsic lowers to
    libm's scalar ``expf``: 16 calls per AVX-512 vector, which made the SiLU epilogue of YOLOv8n's
    convolutions cost more than the convolutions at 160x160."""
    from tvm import te, tirx, topi

    from autosearch.frontend.task import APPROXIMATION_PREFIX  # blocks named so stay out of the task's FLOPs

    neg = te.compute(x.shape, lambda *i: -x(*i), name=f"{APPROXIMATION_PREFIX}sigmoid_negative",
                     tag=topi.tag.ELEMWISE)
    e = topi.fast_exp(neg)  # TOPI names its block "T_fast_exp"
    one = tirx.const(1.0, x.dtype)
    return te.compute(x.shape, lambda *i: one / (one + e(*i)), name=f"{APPROXIMATION_PREFIX}sigmoid",
                      tag=topi.tag.ELEMWISE)


def _legalize_fast_sigmoid(bb, call):
    return bb.call_te(fast_sigmoid, call.args[0], primfunc_name_hint="fast_sigmoid")


def _bf16_conv2d(policy, fallback, target):
    """The conv2d legalisation of a policy with bf16 layers: bf16 where it says so (:mod:`autosearch.tensor_units.
    conv`, its GEMM shaped for the target's bf16 unit), else ``fallback`` (winograd's) or TVM's own."""
    from tvm.relax.transform.legalize_ops.nn import _nn_conv2d

    from autosearch.frontend.winograd import precision_layer_key
    from autosearch.tensor_units.activations import conv2d_cast_input
    from autosearch.tensor_units.conv import flat_conv, legalize
    from autosearch.tensor_units.cpu import bf16_unit
    from autosearch.tensor_units.winograd import legalize as legalize_winograd

    unit = "dpbf16" if bf16_unit(target) == "AVX512-BF16" else "amx"

    def conv2d(bb, call):
        conv = flat_conv(call)
        key = precision_layer_key(call.args[0].ty.shape, call.ty.shape, conv.kernel[0]) if conv is not None else None
        if conv is not None and policy.bf16(key):
            if unit == "dpbf16" and policy.bf16_winograd(key):
                winograd = legalize_winograd(bb, call, unit=unit)
                if winograd is not None:
                    return winograd
            return legalize(bb, call, unit=unit)
        if str(call.args[0].ty.dtype) == "bfloat16":  # a layer kept in fp32 reading a bf16 activation
            return conv2d_cast_input(bb, call)
        return (fallback or _nn_conv2d)(bb, call)

    return conv2d


def _bf16_matmul(policy, target):
    """The matmul legalisation of a policy with bf16 layers: bf16 where it says so (:mod:`autosearch.tensor_units.
    matmul`: two activations of the same batch shape, or a linear layer; on the target's bf16 unit), else TVM's
    own."""
    from tvm.relax.transform.legalize_ops.linear_algebra import _matmul

    from autosearch.tensor_units.cpu import bf16_unit
    from autosearch.tensor_units.matmul import flat_matmul, layer_key, legalize

    unit = "dpbf16" if bf16_unit(target) == "AVX512-BF16" else "amx"

    def matmul(bb, call):
        if flat_matmul(call) is not None and policy.bf16(layer_key(call.args[0].ty.shape, call.args[1].ty.shape)):
            return legalize(bb, call, unit=unit)
        return _matmul(bb, call)

    return matmul


def leaky_relu_as_maximum(after=None):
    """A pass writing ``leakyrelu(x, a)`` as ``maximum(x, a * x)`` (the same for 0 <= a <= 1): Relax's
    ``ConvertLayout`` has no layout rule for leakyrelu and wraps each one in two transposes back to NCHW and
    forth, where maximum and multiply follow the convolution's layout and fuse into its epilogue. ``after``: only
    where ``x`` comes from a convolution this predicate accepts, through element-wise operations (each one's first
    argument, as a batch norm and a bias follow it); None: everywhere."""
    import tvm
    from tvm import relax

    from autosearch.tensor_units.pooling import ELEMENTWISE

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            self.bound: dict[Any, Any] = {}

        def visit_var_binding_(self, binding):
            self.bound[binding.var] = binding.value  # the value as written: args name the original variables
            super().visit_var_binding_(binding)

        def producing_conv(self, x):
            while isinstance(x, relax.Var) and isinstance(self.bound.get(x), relax.Call):
                value = self.bound[x]
                name = getattr(value.op, "name", "")
                if name == "relax.nn.conv2d":
                    return value
                x = value.args[0] if name in ELEMENTWISE and value.args else None
            return None

        def visit_call_(self, call):
            leaky = isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.leakyrelu"
            wanted = leaky and (after is None or after(self.producing_conv(call.args[0])))
            call = super().visit_call_(call)
            alpha = float(call.attrs.alpha) if wanted else -1.0
            if 0.0 <= alpha <= 1.0:
                x = call.args[0]
                return relax.op.maximum(x, relax.op.multiply(x, relax.const(alpha, str(x.ty.dtype))))
            return call

    @tvm.transform.module_pass(opt_level=0, name="LeakyReluAsMaximum")
    def rewrite(mod, _ctx):
        return mutate_relax_functions(Rewrite(mod), mod)

    return rewrite


def matmul_of_a_transpose_transposes_the_smaller():
    """A pass writing ``matmul(a, b^T)`` as ``(matmul(b, a^T))^T`` when ``b`` is larger than ``a`` and the output
    together (``^T`` a swap of the last two axes). An attention's ``v @ attn^T`` (YOLO11's and YOLO12's) otherwise
    transposes the whole score matrix, heads x tokens x tokens (5 MB in YOLO12n's area attention), into a tensor of
    its own before the matmul reads it; rewritten, the transposes are of ``v`` and of the output, a tenth of that,
    and join the reshapes around them. The matmul computes the same dot products."""
    import tvm
    from tvm import relax

    def numel(expr) -> int | None:
        shape = static_shape(expr)
        return None if shape is None else math.prod(shape)

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.matmul"):
                return call
            a, b_t = call.args
            producer = self.lookup_binding(b_t) if isinstance(b_t, relax.Var) else b_t
            if not (isinstance(producer, relax.Call) and isinstance(producer.op, tvm.ir.Op)
                    and producer.op.name == "relax.permute_dims"):
                return call
            b = producer.args[0]
            if isinstance(b, tvm.ir.expr.Constant):  # a weight: its transpose is folded at compile time
                return call
            ndim = getattr(b.ty, "ndim", -1)
            swap = [*range(ndim - 2), ndim - 1, ndim - 2]
            axes = producer.attrs.axes
            if ndim < 2 or getattr(a.ty, "ndim", -1) != ndim or axes is None or [int(x) for x in axes] != swap:
                return call
            sizes = [numel(x) for x in (a, b, call)]
            if None in sizes or sizes[1] <= sizes[0] + sizes[2]:
                return call
            a_t = self.builder_.emit(relax.op.permute_dims(a, swap))
            product = self.builder_.emit(relax.op.matmul(b, a_t, out_dtype=call.attrs.out_dtype))
            return relax.op.permute_dims(product, swap)

    @tvm.transform.module_pass(opt_level=0, name="MatmulOfATransposeTransposesTheSmaller")
    def rewrite(mod, _ctx):  # then the large transposes, left unused, are dropped
        return relax.transform.DeadCodeElimination()(mutate_relax_functions(Rewrite(mod), mod))

    return rewrite


def injective_where_an_input_is_not_broadcast() -> Any:
    """The module pass, run right after ``AnnotateTIROpPattern``, calling injective a PrimFunc it called element-wise
    though an input is neither the output's shape nor broadcast to it (a dimension, right-aligned, neither 1 nor the
    output's). TVM's analysis reads only the indices: a pad after the last row and column stores
    ``out[i, j] = if_then_else(in bounds, in[i, j], 0)``, the same indices on both sides, and is called element-wise;
    ``FuseOps`` then fused it into a convolution's epilogue, where MetaSchedule's inlining computes the padding
    wrong (nearly every schedule of RT-DETR's stem measured a wrong result).
    Injective, it fuses with its readers as a copy does. Broadcasts (a bias, a scale) stay element-wise."""
    import tvm
    from tvm import tirx
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    def broadcasts(shape, out) -> bool:
        return all(str(d) == "1" or str(d) == str(o) for d, o in zip(reversed(shape), reversed(out), strict=False))

    @tvm.transform.module_pass(opt_level=0, name="InjectiveWhereAnInputIsNotBroadcast")
    def mark(mod, _ctx):
        for gv, func in list(mod.functions_items()):
            if not (isinstance(func, tirx.PrimFunc) and func.attrs is not None and "op_pattern" in func.attrs
                    and int(func.attrs["op_pattern"]) == ELEMWISE):
                continue
            *inputs, out = [list(a.shape) for a in ArgInfo.from_prim_func(func)]
            if not all(broadcasts(shape, out) for shape in inputs):
                mod[gv] = func.with_attr("op_pattern", INJECTIVE)
        return mod

    return mark


def _insert_after(passes: list[Any], name: str, new: Any) -> None:
    """``new`` into ``passes`` right after the pass called ``name``."""
    passes.insert(next(i for i, p in enumerate(passes) if p.info.name == name) + 1, new)


def with_folder(passes: list[Any], folder=None) -> list[Any]:
    """``passes`` with ``folder`` (a :class:`autosearch.frontend.fold.ConstantFolder`; None: a new one) folding the
    weight transforms before each of Relax's ``FoldConstant``, which then has no such function left to compile."""
    from autosearch.frontend.fold import ConstantFolder

    folder = folder if folder is not None else ConstantFolder()
    out = []
    for p in passes:
        if p.info.name == "FoldConstant":
            out.append(folder.pass_())
        out.append(p)
    return out


def lowering_passes(target, *, winograd="auto", layout="NCHW", fast_math=DEFAULT_FAST_MATH,
                    precision: str | None = None, folder=None,
                    layer_layouts: dict[str, str] | None = None) -> list[Any]:
    """``winograd``: a mode name or an :class:`autosearch.frontend.winograd.WinogradPolicy` (measured choices);
    ``layout``: the conv2d data layout, ``NCHW`` (as ONNX gives it) or ``NHWC``. Winograd applies to both (to
    NHWC ones in fp32 only). ``layer_layouts`` (fp32, CPU targets): one layout per convolution instead, by its
    geometry (:mod:`autosearch.frontend.layer_layouts`; ``layout`` for the convolutions it does not name).
    ``fast_math="on"``: sigmoid, exp and softmax use TVM's vectorisable approximations.
    ``precision``: the policy's precision mode (``WinogradPolicy.precision``), replacing the policy's own.
    ``folder``: the :class:`autosearch.frontend.fold.ConstantFolder` of the model's lowerings (None: a new one)."""
    from tvm import relax

    from autosearch.frontend import conv_transpose, sampling

    policy = winograd_policy(winograd, precision)
    fast = check_fast_math(fast_math) == "on"
    legalize = [p for p in relax.pipeline.legalize_passes(target) if p.info.name != DEFAULT_SCHEDULE]
    custom = {conv_transpose.OP: conv_transpose.legalize}  # NHWC ones too, and one tap a pixel where one reaches it
    if target.kind.name == "llvm":  # a deformable attention's sampling, channels innermost (frontend.sampling)
        custom[sampling.OP] = sampling.legalize
    if fast:
        custom["relax.sigmoid"] = _legalize_fast_sigmoid
    if policy.mode != "off" and target.kind.name == "llvm":
        from autosearch.frontend.winograd import legalize_map

        custom.update(legalize_map(policy))
    bf16 = policy.precision != "fp32" and target.kind.name == "llvm"
    if bf16:
        custom["relax.nn.conv2d"] = _bf16_conv2d(policy, custom.get("relax.nn.conv2d"), target)
        if converts_layout(target, layout):  # the bf16 lowering is the NHWC one's: NCHW keeps its matmuls fp32 too
            custom["relax.matmul"] = _bf16_matmul(policy, target)
    legalize = [relax.transform.LegalizeOps(customize_legalize_map=custom)
                if p.info.name == "LegalizeOps" else p for p in legalize]
    if target.kind.name == "llvm":  # the sampling fused with the copies before it (frontend.sampling)
        _insert_after(legalize, "AnnotateTIROpPattern", sampling.mark_injective())
        _insert_after(legalize, "FuseTIR", sampling.inline_inputs())
    convert = [leaky_relu_as_maximum(), relax.transform.ConvertLayout({"relax.nn.conv2d": [layout, "OHWI"]})] if (
        converts_layout(target, layout)) else []
    if layer_layouts and target.kind.name == "llvm":
        if bf16:
            from autosearch.errors import UserError

            raise UserError("one layout per convolution is an fp32 lowering: bf16 convolutions are NHWC")
        from autosearch.frontend.layer_layouts import convert_passes

        convert = convert_passes(layer_layouts, default=layout if layout in LAYOUTS else LAYOUTS[0])
    if convert:  # a pad and the operators after it kept in NHWC (frontend.padding, frontend.transposes)
        from autosearch.frontend.padding import pads_as_ops
        from autosearch.frontend.transposes import sink_transposes

        convert = [pads_as_ops(), *convert, sink_transposes()]
    fast_ops = [relax.transform.FastMathTransform()] if fast else []
    if bf16 and convert:  # bf16 convolutions are NHWC
        from autosearch.tensor_units.activations import keep_bf16_activations
        from autosearch.tensor_units.pointwise import flatten_pointwise
        from autosearch.tensor_units.pooling import mark_fusable

        convert.append(keep_bf16_activations())  # the same for every choice of bf16 layers: the tasks match
        convert.append(flatten_pointwise())  # 1x1 convolutions of narrow images in rows of whole tiles
        _insert_after(legalize, "AnnotateTIROpPattern", mark_fusable())  # the poolings fused into convolutions
    # inserted last, so it runs first after AnnotateTIROpPattern: the marks above override it
    _insert_after(legalize, "AnnotateTIROpPattern", injective_where_an_input_is_not_broadcast())
    attention = []
    if bf16 and convert:  # an attention fused into one bf16 kernel on the tiles (tensor_units.attention)
        from autosearch.tensor_units.attention import fuse_attention
        attention.append(fuse_attention(policy.bf16, fast_exp=fast))
    from autosearch.frontend.splits import cancel_splits

    return [matmul_of_a_transpose_transposes_the_smaller(), *attention, *convert, cancel_splits(), *fast_ops,
            *relax.pipeline.library_dispatch_passes(target), *with_folder(legalize, folder),
            relax.transform.AttachAttrLayoutFreeBuffers()]


def lower(relax_mod, target, *, winograd="auto", layout="NCHW", fast_math=DEFAULT_FAST_MATH,
          precision: str | None = None, folder=None, layer_layouts: dict[str, str] | None = None):
    """The model as fused TIR functions: what task extraction and the tuned build both start from. An operator the
    lowering leaves as it is (:func:`unlowered_ops`) is a one-line error here, before any tuning, not in the build
    after it."""
    import tvm

    from autosearch.errors import UserError

    with target, tvm.transform.PassContext(opt_level=3):
        passes = lowering_passes(target, winograd=winograd, layout=layout, fast_math=fast_math, precision=precision,
                                 folder=folder, layer_layouts=layer_layouts)
        lowered = tvm.transform.Sequential(passes)(relax_mod)
    left = unlowered_ops(lowered)
    if left:
        raise UserError(f"TVM has no lowering for {', '.join(left)} in the {layout} lowering for {target.kind.name}: "
                        "the model would not build" + ("; try --layout NCHW" if layout != "NCHW" else ""))
    return lowered


def unlowered_ops(mod) -> list[str]:
    """The Relax operators a lowered module still calls that legalisation should have lowered (each named once,
    with its layout where it has one): TVM leaves a call it has no lowering for as it is (TOPI lowers a transposed
    convolution in NCHW alone, for one), and the VM then fails to build the model, after the tuning."""
    import tvm
    from tvm import relax

    found: list[str] = []

    def visit(expr) -> None:
        if not (isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op)):
            return
        if expr.op.get_attr("FLegalize") is None:  # call_tir and the VM's builtins: built as they are
            return
        layout = getattr(expr.attrs, "data_layout", None) if expr.attrs is not None else None
        name = str(expr.op.name).removeprefix("relax.") + (f" ({layout})" if layout else "")
        if name not in found:
            found.append(name)

    for func in mod.functions.values():
        attrs = func.attrs if isinstance(func, relax.Function) and func.attrs is not None else {}
        if isinstance(func, relax.Function) and "Codegen" not in attrs and "Composite" not in attrs:
            relax.analysis.post_order_visit(func, visit)  # an external codegen's functions are its to build
    return found


def default_schedules(target) -> list[Any]:
    """TVM's default schedules (dlight) for the kernels a database did not schedule: GPU targets only (a
    kernel without thread bindings does not build for a GPU); on CPU targets TVM has none."""
    from tvm import relax

    return [p for p in relax.pipeline.legalize_passes(target) if p.info.name == DEFAULT_SCHEDULE]


def _backend_pipeline(target):
    """The target's backend pipeline module (``tvm.relax.backend.<backend>.pipeline``): 0.27's ``relax.pipeline``
    dispatches to backend packages that do not export their dataflow-lowering and finalisation passes
    (``cpu_generic``, ``cuda``), and another backend's passes would build wrongly (the CPU's lack CUDA graphs)."""
    import importlib

    from autosearch.errors import UserError

    kind = target.kind.name
    backend = {"llvm": "cpu_generic", "cuda": "cuda", "rocm": "rocm"}.get(kind)
    if backend is None and "gpu" in target.keys:
        backend = "gpu_generic"  # as relax.pipeline does for the other GPU kinds (metal, vulkan, ...)
    if backend is None:
        raise UserError(f"cannot build for target kind {kind!r}: TVM has a Relax pipeline for llvm and GPU targets")
    return importlib.import_module(f"tvm.relax.backend.{backend}.pipeline")


PLAN_MEMORY = "StaticPlanBlockMemory"  # Relax's static memory planning, the first of the finalisation passes


def _lower_and_finalize(target, *, plan_memory: bool = True) -> list[Any]:
    """The target's dataflow-lowering and finalisation passes; ``plan_memory=False`` leaves out Relax's static
    memory planning (every intermediate tensor then gets its own allocation at run time, from the VM's pool)."""
    pipeline = _backend_pipeline(target)
    finalize = [p for p in pipeline.finalize_passes(target) if plan_memory or p.info.name != PLAN_MEMORY]
    return [*pipeline.dataflow_lower_passes(target), *finalize]


def planning_passes(target) -> list[Any]:
    """The passes of the build up to and including Relax's static memory planning: after them the module's
    allocations are what the VM will allocate (``relax.analysis.estimate_memory_usage`` reads them)."""
    from tvm import relax

    return [*_backend_pipeline(target).dataflow_lower_passes(target), relax.transform.StaticPlanBlockMemory()]


def apply_database(lowered, target, database, *, prepack: bool = True, folder=None):
    """The lowered model with the database's schedules in place and their weight prepacking folded into
    the constants (no ``*_weight_prepack`` call is left to run at inference time); on GPU targets, the
    kernels the database lacks get TVM's default schedules. ``prepack=False``: the layout rewrite a schedule
    asks for stays inside its kernel, run on every call (the weights keep the model's layout)."""
    import tvm
    from tvm import relax

    with target, database, tvm.transform.PassContext(opt_level=3):
        mod = relax.transform.MetaScheduleApplyDatabase()(lowered)
        if prepack:
            mod = relax.transform.SplitLayoutRewritePreproc()(with_root_blocks(mod))
            mod = tvm.transform.Sequential(with_folder([relax.transform.FoldConstant()], folder))(mod)
        return tvm.transform.Sequential(default_schedules(target))(mod)


def with_root_blocks(mod):
    """``mod`` with every PrimFunc's body inside a root block. TVM lowers some operators to one opaque block that
    calls into its runtime (``topk``: an NMS-free head's selection), with no root block around it, and
    ``SplitLayoutRewritePreproc``, which reads every function of the module, then stops the build on it. Wrapped,
    the function computes the same and the pass finds no layout to rewrite in it."""
    import tvm
    from tvm import s_tir

    from autosearch.frontend.task import has_root_block

    def rooted(func):
        if has_root_block(func):
            return func
        return func.with_body(s_tir.SBlockRealize([], True, s_tir.SBlock([], [], [], "root", func.body)))

    return tvm.IRModule({gv: rooted(f) if isinstance(f, tvm.tirx.PrimFunc) else f for gv, f in mod.functions_items()},
                        attrs=mod.attrs, global_infos=mod.global_infos)


def untuned_module(relax_mod, target):
    """The model as TVM's default build lowers it (``tvm.compile``'s library dispatch and legalisation), ready for
    :func:`build_module`: the untuned baseline."""
    import tvm
    from tvm import relax

    with target, tvm.transform.PassContext(opt_level=3):
        passes = [*relax.pipeline.library_dispatch_passes(target), *with_folder(relax.pipeline.legalize_passes(target))]
        return tvm.transform.Sequential(passes)(relax_mod)


def tuned_module(relax_mod, target, database, *, winograd="auto", layout="NCHW", fast_math=DEFAULT_FAST_MATH,
                 prepack: bool = True, folder=None):
    """The model lowered as for its tasks with the database applied (tasks it lacks stay unscheduled), ready for
    :func:`build_module`."""
    from autosearch.frontend.fold import ConstantFolder

    folder = folder if folder is not None else ConstantFolder()
    lowered = lower(relax_mod, target, winograd=winograd, layout=layout, fast_math=fast_math, folder=folder)
    return apply_database(lowered, target, database, prepack=prepack, folder=folder)


def build_module(mod, target, *, plan_memory: bool = True):
    """Build a legalised Relax module (:func:`tuned_module`, :func:`untuned_module`) with the target's own
    dataflow-lowering and finalisation passes."""
    import tvm
    from tvm import relax

    from autosearch.frontend.rewrites import build_rewrites
    from autosearch.tvm_compat import build_context

    mod = build_rewrites(mod)  # as every tuning build (autosearch.measure.kernels.build)

    @tvm.transform.module_pass(opt_level=3)
    def pipeline(mod, _ctx):
        return tvm.transform.Sequential(_lower_and_finalize(target, plan_memory=plan_memory))(mod)

    # the kernels built as the tuning built them (autosearch.measure.kernels.build)
    with target, build_context(target.kind.name, opt_level=3):
        return relax.build(mod, target=target, relax_pipeline=pipeline)


def build_tuned(relax_mod, target, database, *, winograd="auto", layout="NCHW",
                fast_math=DEFAULT_FAST_MATH):
    """Compile a Relax model with a MetaSchedule database applied (tasks it lacks stay unscheduled)."""
    return build_module(tuned_module(relax_mod, target, database, winograd=winograd, layout=layout,
                                     fast_math=fast_math), target)


__all__ = ["DEFAULT_FAST_MATH", "DEFAULT_LAYOUT", "DEFAULT_PRECISION", "DEFAULT_SCHEDULE", "FAST_MATH_MODES", "LAYOUTS",
           "LAYOUT_MODES", "OLD_LOWERING", "PLAN_MEMORY", "PRECISION_MODES", "apply_database", "build_module",
           "build_tuned", "check_fast_math", "check_layout", "check_precision", "default_schedules", "fast_sigmoid",
           "injective_where_an_input_is_not_broadcast", "leaky_relu_as_maximum", "lower", "lowering_passes",
           "matmul_of_a_transpose_transposes_the_smaller", "planning_passes", "resolve_precision", "tuned_module",
           "unlowered_ops", "untuned_module", "with_folder"]
