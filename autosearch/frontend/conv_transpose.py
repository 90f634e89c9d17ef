"""Transposed convolutions in either layout, each output pixel computed from the input pixels that reach it.

A segmentation export's mask prototypes are upsampled by a ``ConvTranspose`` (Ultralytics' ``Proto``: a 2x2 filter
at stride 2). TVM's legalisation has two gaps for it:

- it lowers NCHW alone (TOPI's ``conv2d_transpose_nchw``); ``ConvertLayout`` turns a transposed convolution after an
  NHWC layer into NHWC too (the op follows its input's layout), which then reaches the VM un-lowered and the
  model does not build;
- it computes a stride-``s`` transposed convolution as a direct one over the input dilated with ``s - 1`` zeros
  between pixels: of a 2x2 stride-2 filter's four taps per output pixel three multiply zeros.

Where the filter is as large as the stride and nothing is padded (every Ultralytics upsampling), each output pixel
takes exactly one tap, the input pixel ``(h // s, w // s)`` and the filter's ``(h % s, w % s)``: a reduction over
the input channels alone, in the layout the call has. Any other transposed convolution in NHWC is TOPI's NCHW one
between two transposes in the same kernel; in NCHW it is left to TVM's own.
"""

from __future__ import annotations

from autosearch.frontend.lowering import LAYOUTS

OP = "relax.nn.conv2d_transpose"


def one_tap(attrs, kernel_shape) -> bool:
    """Whether each output pixel takes exactly one filter tap: one group, no dilation, the filter the stride's size,
    no padding and no output padding."""
    strides = [int(s) for s in attrs.strides]
    return (int(attrs.groups) == 1 and all(int(d) == 1 for d in attrs.dilation)
            and [int(kernel_shape[2]), int(kernel_shape[3])] == strides
            and all(int(p) == 0 for p in attrs.padding) and all(int(p) == 0 for p in attrs.output_padding))


def _one_tap_compute(data, kernel, layout: str, out_dtype: str):
    """The transposed convolution of a filter as large as its stride: one multiply-add per input channel, summed in
    fp32 where the output is a 16-bit float (as the tensor units sum), then rounded once."""
    from tvm import te

    channels, out_channels, sh, sw = (int(x) for x in kernel.shape)
    acc = "float32" if out_dtype in ("bfloat16", "float16") else out_dtype
    rc = te.reduce_axis((0, channels), name="rc")

    def tap(n, c, h, w):
        return te.sum(data[(n, rc, h // sh, w // sw) if layout == "NCHW" else (n, h // sh, w // sw, rc)]
                      .astype(acc) * kernel[rc, c, h % sh, w % sw].astype(acc), axis=rc)

    if layout == "NCHW":
        n, _, height, width = data.shape
        out = te.compute((n, out_channels, height * sh, width * sw), tap, name="conv2d_transpose",
                         tag="conv2d_transpose_nchw")
    else:
        n, height, width, _ = data.shape
        out = te.compute((n, height * sh, width * sw, out_channels), lambda n, h, w, c: tap(n, c, h, w),
                         name="conv2d_transpose", tag="conv2d_transpose_nhwc")
    if acc == out_dtype:
        return out
    return te.compute(out.shape, lambda *i: out(*i).astype(out_dtype), name="conv2d_transpose_cast")


def legalize(bb, call):
    """``LegalizeOps`` entry for ``relax.nn.conv2d_transpose``: the one-tap compute where it applies, TOPI's NCHW
    compute between transposes for any other NHWC call, and TVM's own legalisation for the rest."""
    from tvm import topi
    from tvm.relax.transform.legalize_ops.nn import _nn_conv2d_transpose

    attrs = call.attrs
    layout = str(attrs.data_layout)
    if layout not in LAYOUTS or str(attrs.out_layout) != layout or str(attrs.kernel_layout) != "IOHW":
        return _nn_conv2d_transpose(bb, call)
    out_dtype = str(call.ty.dtype)
    if one_tap(attrs, call.args[1].ty.shape):
        return bb.call_te(lambda d, k: _one_tap_compute(d, k, layout, out_dtype), call.args[0], call.args[1],
                          primfunc_name_hint="conv2d_transpose")
    if layout == "NCHW":
        return _nn_conv2d_transpose(bb, call)
    strides = [int(s) for s in attrs.strides]
    padding = [int(p) for p in attrs.padding]
    output_padding = [int(p) for p in attrs.output_padding]
    dilation = [int(d) for d in attrs.dilation]
    groups = int(attrs.groups)

    def nhwc(data, kernel):
        if any(d != 1 for d in dilation):
            kernel = topi.nn.dilate(kernel, [1, 1, *dilation], name="kernel_dilate")
        out = topi.nn.group_conv2d_transpose_nchw(topi.transpose(data, (0, 3, 1, 2)), kernel, strides, padding,
                                                  out_dtype, output_padding, groups)
        return topi.transpose(out, (0, 2, 3, 1))

    return bb.call_te(nhwc, call.args[0], call.args[1], primfunc_name_hint="conv2d_transpose")


__all__ = ["OP", "legalize", "one_tap"]
