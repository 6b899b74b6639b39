"""Discovery finds inputs by name and by content, and says what it passed over and why."""

from __future__ import annotations

import gzip
import json

from conftest import corpus_path

from trace_doctor.discover import classify, discover


def test_by_name_and_by_content(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 0, "time/total": 1.0}\n')
    (run / "metrics.jsonl.pre_resume_000010").write_text('{"step": 0}\n')
    (run / "trace_events.jsonl").write_text('{"name": "main", "ph": "B", "pid": 0, "tid": 1, "ts": 1.0, "args": {}}\n')
    (run / "timing_spans.jsonl").write_text('{"step": 0, "spans": []}\n')
    (run / "config.json").write_text("{}")
    (run / "checkpoints.jsonl").write_text('{"name": "000001", "batch": 1, "state_path": "tinker://x"}\n')
    (run / "code.diff").write_text("### repo: /x @ abc\n")
    (run / "logs.log").write_text("root:1 [INFO] Command line invocation: python train.py\n")
    (run / "my_profile.json").write_text(json.dumps({"start_time": 1, "duration": 1, "root_frame": None}))
    (run / "session.pyisession").write_text("{}")
    (run / "stdout.txt").write_text(
        "\n===== 2026-03-05 12:00:01 asyncio task dump [main] 1 task(s) @ interval=1.0s =====\n"
        "  'Task-1': pending  <coroutine object main at 0x1>\n===== 2026-03-05 12:00:01 end [main] =====\n"
    )
    (run / "trace.json").write_text('[{"name": "a", "ph": "B", "ts": 1, "pid": 0, "tid": 0}]')
    with gzip.open(run / "kineto.json.gz", "wt") as fh:
        json.dump({"traceEvents": [{"ph": "X", "name": "op", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]}, fh)
    (run / "renamed_metrics.jsonl").write_text('{"progress/batch": 0, "time/total": 3.0}\n')
    (run / "timing_gantt.html").write_text("<html></html>")
    (run / "empty.jsonl").write_text("")
    (run / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    (run / "train_rollout_summaries.jsonl").write_text('{"schema_version": 1, "traj_idx": 0}\n')

    found = discover([run])
    names = {kind: sorted(p.name for p in paths) for kind, paths in found.files.items()}
    assert names["metrics"] == ["metrics.jsonl", "metrics.jsonl.pre_resume_000010", "renamed_metrics.jsonl"]
    assert names["trace"] == ["kineto.json.gz", "trace.json", "trace_events.jsonl"]
    assert names["spans"] == ["timing_spans.jsonl"]
    assert names["profile"] == ["my_profile.json", "session.pyisession"]
    assert names["dump"] == ["stdout.txt"]
    assert names["log"] == ["logs.log"]
    assert names["code_diff"] == ["code.diff"]
    assert names["rollouts"] == ["train_rollout_summaries.jsonl"]
    passed = {p.path.rsplit("/", 1)[-1]: p.reason for p in found.passed_over}
    assert set(passed) == {"timing_gantt.html", "empty.jsonl", "blob.bin"}
    assert passed["empty.jsonl"] == "empty file"


def test_missing_path_is_reported(tmp_path):
    found = discover([tmp_path / "nope"])
    assert found.missing == [str(tmp_path / "nope")]


def test_corpus_log_dir_with_wandb_output():
    run = corpus_path("sushantmehta-tinker-cookbook/logs_v2")
    found = discover([run])
    assert [p.name for p in found.files["metrics"]] == ["metrics.jsonl"]
    assert [p.name for p in found.files["config"]] == ["config.json"]
    assert [p.name for p in found.files["checkpoints"]] == ["checkpoints.jsonl"]
    assert [p.name for p in found.files["log"]] == ["output.log"]


def test_corpus_pyinstrument_html_sessions_are_profiles():
    path = corpus_path("pyinstrument/html_renderer/demo-data/sympy_calculation.json")
    assert classify(path) == ("profile", "")


def test_corpus_viztracer_trace_is_a_trace():
    assert classify(corpus_path("viztracer/example/json/async_simple.json"))[0] == "trace"


def test_a_linked_folder_is_named_when_it_leads_out_of_the_tree(tmp_path):
    elsewhere = tmp_path / "elsewhere" / "run-7"
    elsewhere.mkdir(parents=True)
    (elsewhere / "metrics.jsonl").write_text('{"step": 0, "time/total": 1.0}\n')
    runs = tmp_path / "runs"
    (runs / "run-1" / "wandb" / "run-x").mkdir(parents=True)
    (runs / "run-1" / "metrics.jsonl").write_text('{"step": 0, "time/total": 1.0}\n')
    (runs / "run-1" / "wandb" / "latest-run").symlink_to("run-x")  # a second name inside: nothing to say
    (runs / "run-1" / "loop").symlink_to("..")  # a loop inside: not followed, nothing to say
    (runs / "run-7").symlink_to(elsewhere)  # a run kept elsewhere: not read, and said
    found = discover([runs])
    assert [p.name for p in found.files["metrics"]] == ["metrics.jsonl"]
    assert [(p.path, p.reason.split(":")[0]) for p in found.passed_over] == [
        (str(runs / "run-7"), "symbolic link to a folder outside the one named")
    ]


def test_a_folder_named_like_an_input_file_is_said_and_searched(tmp_path):
    run = tmp_path / "run"
    (run / "metrics.jsonl").mkdir(parents=True)
    (run / "metrics.jsonl" / "metrics.jsonl").write_text(json.dumps({"step": 0, "loss": 1.0}) + "\n")
    found = discover([run])
    assert [(p.path, p.reason) for p in found.passed_over] == [
        (str(run / "metrics.jsonl"), "a folder named like an input file: its files are searched, it is not read as one")
    ]
    assert found.files["metrics"] == [run / "metrics.jsonl" / "metrics.jsonl"]
