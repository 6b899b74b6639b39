"""A step number no 64-bit column can hold is no step: the span is kept without one, nothing crashes."""

from __future__ import annotations

import json

import pytest

from trace_doctor.api import analyze, load_run


@pytest.mark.parametrize("step", ["99999999999999999999", "1e300", "-99999999999999999999", "1.5", "true"])
def test_an_end_event_with_an_unrepresentable_step_is_kept_without_one(tmp_path, step):
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": i, "time/total": 1.0}) + "\n" for i in range(3))
    )
    (tmp_path / "trace_events.jsonl").write_text(
        '{"name": "forward_backward", "ph": "B", "pid": 0, "tid": 1, "ts": 10.0, "args": {"track": "main", "n": 1}}\n'
        f'{{"name": "forward_backward", "ph": "E", "pid": 0, "tid": 1, "ts": 20, "args": {{"step": {step}, "x": 2}}}}\n'
    )
    run = load_run(tmp_path)
    assert run.spans.height == 1 and run.spans["step"].to_list() in ([None], [0])
    analyze(run)  # and the rules run over it


@pytest.mark.parametrize("step", [99999999999999999999, 1e300, -(2**63) - 1, float("inf"), 1.5, True])
def test_a_step_attribute_an_int64_column_cannot_hold_is_no_step(step):
    from trace_doctor.ingest.trace.span_args import _step_of

    assert _step_of({"step": step}) is None
    assert _step_of({"step": 7.0}) == 7
