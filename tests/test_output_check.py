"""The check of a runtime's outputs against ONNX Runtime's (``report``): what it must see and what it must pass."""

from __future__ import annotations

import numpy as np

from autosearch.deploy import report
from autosearch.deploy.timing import max_relative_error, relative_error


def _detector_output(seed: int = 0) -> np.ndarray:
    """A YOLO head's output on a noise image: 4 box rows in pixels (to 640), 80 class-score rows near 1e-4."""
    rng = np.random.default_rng(seed)
    return np.concatenate([rng.uniform(4, 636, (1, 4, 8400)), rng.uniform(1e-5, 1.6e-4, (1, 80, 8400))],
                          axis=1).astype(np.float32)


def test_a_wrong_class_score_is_seen_beside_boxes_of_640_pixels():
    """Against the output's largest value alone a doubled score row moved the error by 2.5e-7 (it passed fp32's
    1e-3); each row against its own magnitude it fails the fp32 check."""
    y = _detector_output()
    x = y.copy()
    x[0, 10] *= 2
    assert float(np.abs(x - y).max() / np.abs(y).max()) < 1e-6  # what the check used to see
    assert relative_error(x, y) > report.TOLERANCE


def test_a_low_precision_judges_a_nearly_dead_channel_against_its_tolerance_of_the_output():
    """bf16 rounding where a channel is nearly dead (a ReLU's threshold: values of 1e-3 of the output's largest,
    off by a fifth of themselves) is no wrong kernel at bf16's tolerance, which judges slices down to 5% of the
    output's largest value; fp32's check, down to a millionth, sees it; a channel off by more than bf16's
    tolerance of the output fails both."""
    y = np.abs(np.random.default_rng(4).normal(size=(1, 96, 16, 16))).astype(np.float32)
    y[0, 7] *= 1e-3
    x = y.copy()
    x[0, 7] *= 1.2
    bf16 = report.LOW_PRECISION_TOLERANCE
    assert relative_error(x, y, floor=bf16) < bf16 < relative_error(x, y)
    x[0, 7] = y[0, 7] + 0.1 * np.abs(y).max()
    assert relative_error(x, y, floor=bf16) > bf16


def test_rounding_passes_and_a_near_zero_element_is_judged_by_its_row():
    """fp32 rounding of every element passes fp32's tolerance, and so does an element near zero whose absolute
    error is small beside the rest of its row (an elementwise relative error would fail it)."""
    y = _detector_output()
    rng = np.random.default_rng(1)
    x = (y * (1 + rng.uniform(-1e-6, 1e-6, y.shape))).astype(np.float32)
    assert relative_error(x, y) < report.TOLERANCE
    z = np.random.default_rng(2).normal(size=(1, 125, 13, 13)).astype(np.float32)
    z[0, 3, 4, 5] = 1e-7
    w = z.copy()
    w[0, 3, 4, 5] = 2e-6  # 20x the element, 1e-6 of its row
    assert relative_error(w, z) < report.TOLERANCE


def test_logits_are_judged_whole_not_element_by_element():
    """A (1, 1000) output has slices of one element along its second axis: judged against its largest value."""
    y = np.random.default_rng(3).normal(size=(1, 1000)).astype(np.float32)
    x = y.copy()
    x[0, np.argmin(np.abs(y))] += 1e-5  # the logit nearest zero, off by 1e-5
    assert relative_error(x, y) < report.TOLERANCE


def test_nan_inf_and_a_shape_change_never_match(tmp_path):
    y = _detector_output()
    for bad in (np.nan, np.inf):
        x = y.copy()
        x[0, 0, 0] = bad
        assert relative_error(x, y) == float("inf")
    assert relative_error(y[:, :80], y) == float("inf")
    assert relative_error(y, y) == 0.0
    a, b = str(tmp_path / "a.npz"), str(tmp_path / "b.npz")
    np.savez(a, out0=y, out1=y[0, :4])
    np.savez(b, out0=y, out1=y[0, :4] + 100)  # the second output's boxes off by 100 pixels
    assert max_relative_error(a, b) > 0.1 and max_relative_error(a, a) == 0.0


def test_a_bf16_row_is_shown_beside_openvinos_deviation_in_bf16():
    """On a model whose outputs bf16 moves past the tolerance (a deep net of random weights), the TVM row says how far
    OpenVINO's bf16 moved them too; the verdicts are not changed, and an fp32 row gets no such note."""
    ov = "OpenVINO (default precision: bf16)"
    checks = {"TVM tuned (bf16 on 3 layers)": report._check_from(0.25, "bf16"), ov: report._check_from(0.51, "bf16"),
              "OpenVINO (fp32)": report._check_from(1e-4, "f32")}
    report._beside_peer(checks, {"TVM tuned (bf16 on 3 layers)": "bf16", ov: "bf16", "OpenVINO (fp32)": "f32"}, ov)
    tvm = checks["TVM tuned (bf16 on 3 layers)"]
    assert not tvm.matches and tvm.line("TVM", markup=False).endswith(f"; {ov}: 5.10e-01)")
    assert ov + ":" not in checks[ov].note and checks["OpenVINO (fp32)"].note == ""
