"""``report``'s warning when a runtime's fresh processes ran at paces far apart (a shared machine's spell)."""

from __future__ import annotations

from autosearch.deploy.timing import PACE_SPREAD, Timing, pace_note


def _timing(name: str, medians: list[float]) -> Timing:
    return Timing(name, [m for m in medians for _ in range(3)], process_medians=medians)


def test_processes_at_one_pace_say_nothing_and_a_runtime_whose_middle_moved_is_named():
    steady = [_timing("TVM tuned", [30.1, 30.9, 29.8, 30.4, 30.0]), _timing("ONNX Runtime", [56.0, 57.5, 55.1, 56.2])]
    assert pace_note(steady) == ""
    # one slow process in ten leaves the median where it is: nothing to say
    one_slow = [_timing("OpenVINO (fp32)", [52.0, 53.0, 52.5, 51.8, 52.2, 53.1, 52.7, 52.9, 51.9, 80.0])]
    assert pace_note(steady + one_slow) == ""
    # a spell that slowed four of ten: the middle half spans both paces
    spell = [_timing("OpenVINO (fp32)", [52.0, 53.0, 78.0, 51.8, 79.0, 53.1, 80.0, 52.9, 77.0, 52.2])]
    note = pace_note(steady + spell)
    assert note.startswith("the machine's pace moved while timing: the middle of OpenVINO (fp32)'s 10 processes ran")
    assert "x apart)" in note and "run report again" in note
    spread = float(note.split("(")[-1].split("x apart")[0])
    assert spread > 1.4


def test_few_processes_are_judged_whole_and_one_or_none_say_nothing():
    edge = 30.0 * PACE_SPREAD
    assert pace_note([_timing("TVM tuned", [30.0, edge])]) == ""  # at the spread itself: the repeats' noise
    assert pace_note([_timing("TVM tuned", [30.0, edge * 1.01, 30.2])]) != ""  # under 4 processes: all of them
    assert pace_note([_timing("TVM tuned", [30.0]), Timing("ONNX Runtime", [], error="crashed")]) == ""
