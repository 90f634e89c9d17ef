"""``report``'s warning when a runtime's fresh processes ran at paces far apart (a shared machine's spell)."""

from __future__ import annotations

from autosearch.deploy.timing import PACE_SPREAD, Timing, pace_note


def _timing(name: str, medians: list[float]) -> Timing:
    return Timing(name, [m for m in medians for _ in range(3)], process_medians=medians)


def test_processes_at_one_pace_say_nothing_and_one_far_apart_is_named_with_its_spread():
    steady = [_timing("TVM tuned", [30.1, 30.9, 29.8]), _timing("ONNX Runtime", [56.0, 57.5, 55.1])]
    assert pace_note(steady) == ""
    moved = [*steady, _timing("OpenVINO (fp32)", [52.0, 54.0, 78.0])]
    note = pace_note(moved)
    assert note.startswith("the machine's pace moved while timing: OpenVINO (fp32)'s 3 processes ran 52.00-78.00 ms")
    assert "(1.50x)" in note and "run report again" in note


def test_the_threshold_and_what_cannot_tell():
    edge = 30.0 * PACE_SPREAD
    assert pace_note([_timing("TVM tuned", [30.0, edge])]) == ""  # at the spread itself: the repeats' noise
    assert pace_note([_timing("TVM tuned", [30.0, edge * 1.01])]) != ""
    # one process, or none, says nothing of its pace against another's
    assert pace_note([_timing("TVM tuned", [30.0]), Timing("ONNX Runtime", [], error="crashed")]) == ""
