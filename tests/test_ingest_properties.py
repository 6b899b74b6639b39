"""Property tests: mutating a valid metrics file never crashes ingest and loses only the lines
that were damaged; every untouched valid line is still a row."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trace_doctor.ingest.parsers.metrics import parse_metrics_file
from trace_doctor.model import IngestWarning

VALID = [
    json.dumps({"step": i, "time/total": 1.0 + i, "time/get_batch": 0.1, "train_mean_nll": 0.5 - i / 100})
    for i in range(30)
]
KEPT_WITH_WARNING = "row kept"


def mutate(lines: list[bytes], ops: list[tuple[str, int, bytes]]) -> tuple[bytes, set[int]]:
    """Apply mutations; return the file bytes and the indices of lines left untouched."""
    lines = list(lines)
    touched: set[int] = set()
    for op, index, payload in ops:
        i = index % len(lines)
        if op == "truncate":
            lines[i] = lines[i][: max(1, len(lines[i]) * (index % 7) // 8)]
        elif op == "splice":
            lines[i] = lines[i][: index % max(1, len(lines[i]))] + payload + lines[i][index % max(1, len(lines[i])) :]
        elif op == "drop_field":
            try:
                record = json.loads(lines[i])
            except ValueError:
                continue  # already damaged by an earlier mutation
            if not isinstance(record, dict) or not record:
                continue
            record.pop(sorted(record)[index % len(record)])
            lines[i] = json.dumps(record).encode()
        elif op == "replace":
            lines[i] = payload
        touched.add(i)
    return b"\n".join(lines) + b"\n", set(range(len(lines))) - touched


operations = st.lists(
    st.tuples(
        st.sampled_from(["truncate", "splice", "drop_field", "replace"]),
        st.integers(min_value=0, max_value=10_000),
        st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b and b"\r" not in b),
    ),
    max_size=8,
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(ops=operations)
def test_mutated_metrics_never_crash_and_keep_untouched_lines(tmp_path, ops):
    data, untouched = mutate([line.encode() for line in VALID], ops)
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(data)
    warnings: list[IngestWarning] = []
    frame, info = parse_metrics_file(path, warnings)

    line_problems = [w for w in warnings if KEPT_WITH_WARNING not in w.problem]
    nonblank = sum(1 for raw in data.split(b"\n") if raw.strip())
    assert info.records + len(line_problems) == nonblank
    assert frame.height == info.records
    kept_lines = set(frame["line"].to_list())
    assert {i + 1 for i in untouched} <= kept_lines
    kept_steps = dict(zip(frame["line"].to_list(), frame["step"].to_list(), strict=False))
    for i in untouched:
        assert kept_steps[i + 1] == i
