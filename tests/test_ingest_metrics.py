"""metrics.jsonl -> steps: every valid record kept, every bad one accounted for."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from conftest import CORPUS_MISSING, corpus_metrics_files, corpus_path

from trace_doctor.ingest.parsers.metrics import parse_metrics_file, parse_metrics_files
from trace_doctor.model import IngestWarning


def write_lines(path: Path, rows: list[str], *, terminated: bool = True) -> Path:
    path.write_text("\n".join(rows) + ("\n" if terminated else ""), encoding="utf-8")
    return path


def parse(path: Path) -> tuple[pl.DataFrame, list[IngestWarning]]:
    warnings: list[IngestWarning] = []
    frame, _ = parse_metrics_file(path, warnings)
    return frame, warnings


def test_late_key_after_row_1000_gets_its_column(tmp_path):
    rows = [json.dumps({"step": i, "time/total": 1.0 + i * 1e-3}) for i in range(1500)]
    rows[1234] = json.dumps({"step": 1234, "time/total": 2.0, "test/nll": 0.61})
    frame, warnings = parse(write_lines(tmp_path / "metrics.jsonl", rows))
    assert warnings == []
    assert frame.height == 1500
    assert frame.schema["test/nll"] == pl.Float64
    assert frame.filter(pl.col("test/nll").is_not_null())["step"].to_list() == [1234]


def test_nan_infinity_and_truncated_last_line(tmp_path):
    rows = [
        '{"step": 0, "train_mean_nll": NaN, "time/total": 1.5}',
        '{"step": 1, "train_mean_nll": Infinity, "time/total": -Infinity}',
        '{"step": 2, "train_mean_nll": 0.5, "time/tot',
    ]
    frame, warnings = parse(write_lines(tmp_path / "metrics.jsonl", rows, terminated=False))
    assert frame["step"].to_list() == [0, 1]
    assert frame["train_mean_nll"].is_nan().to_list() == [True, False]
    assert frame["train_mean_nll"][1] == float("inf")
    assert len(warnings) == 1 and warnings[0].line == 3 and "truncated" in warnings[0].problem


def test_garbage_wrong_types_and_strings_are_kept_or_reported(tmp_path):
    rows = [
        '{"step": 0, "loss": 1.0}',
        "\x00\x01garbage\xff",
        "[1, 2, 3]",
        '{"step": "seven", "loss": 2.0}',
        '{"step": 3, "loss": 0.5, "state_path": "tinker://run/weights/000003", "extra": {"a": 1}}',
    ]
    frame, warnings = parse(write_lines(tmp_path / "metrics.jsonl", rows))
    assert frame.height == 3  # rows 1, 4 (no usable step but kept) and 5
    assert frame["step"].to_list() == [0, None, 3]
    assert frame["state_path"].to_list() == [None, None, "tinker://run/weights/000003"]
    assert json.loads(frame["extra"][2]) == {"a": 1}
    problems = {w.line: w.problem for w in warnings}
    assert set(problems) == {2, 3, 4}
    assert "not valid JSON" in problems[2] and "expected a JSON object" in problems[3]


def test_resume_appends_start_new_segment_but_eval_rows_do_not(tmp_path):
    steps = [0, 1, 2, 3, 4, 2, 3, 4, 5]
    rows = [json.dumps({"step": s, "time/total": 1.0}) for s in steps]
    rows.insert(3, json.dumps({"step": 1, "test/env/all/reward/total": 0.3}))  # late async eval row
    frame, _ = parse(write_lines(tmp_path / "metrics.jsonl", rows))
    train = frame.filter(~pl.col("is_eval_row"))
    assert train["segment"].to_list() == [0, 0, 0, 0, 0, 1, 1, 1, 1]
    assert frame.filter(pl.col("is_eval_row"))["segment"].to_list() == [0]


def test_pre_resume_backup_rows_are_kept_and_marked_superseded(tmp_path):
    backup = write_lines(tmp_path / "metrics.jsonl.pre_resume_000003", [json.dumps({"step": s}) for s in range(6)])
    live = write_lines(tmp_path / "metrics.jsonl", [json.dumps({"step": s}) for s in [0, 1, 2, 3, 4, 5, 6]])
    warnings: list[IngestWarning] = []
    frame, inputs = parse_metrics_files([live, backup], warnings)
    assert [i.records for i in inputs] == [6, 7]
    assert frame.filter(pl.col("superseded")).height == 6
    assert frame.filter(~pl.col("superseded"))["step"].to_list() == list(range(7))


def test_step_fallback_keys_for_custom_trainers(tmp_path):
    rows = [json.dumps({"progress/batch": i, "time/total": 3.0}) for i in range(3)] + [json.dumps({"eval/acc": 0.5})]
    frame, _ = parse(write_lines(tmp_path / "m.jsonl", rows))
    assert frame["step"].to_list() == [0, 1, 2, None]
    assert frame["step_key"].to_list() == ["progress/batch"] * 3 + [None]


def test_empty_and_blank_files(tmp_path):
    frame, warnings = parse(write_lines(tmp_path / "metrics.jsonl", [], terminated=False))
    assert frame.height == 0 and warnings == []
    frame, warnings = parse(write_lines(tmp_path / "metrics.jsonl", ["", "  ", ""]))
    assert frame.height == 0 and warnings == []


CORPUS_FILES = corpus_metrics_files() or [pytest.param(None, marks=pytest.mark.skip(reason=CORPUS_MISSING))]


@pytest.mark.parametrize(
    "path", CORPUS_FILES, ids=lambda p: "corpus-absent" if p is None else p.parent.name[-40:] + "/" + p.name
)
def test_every_corpus_metrics_file_ingests_without_loss(path):
    nonblank = sum(1 for line in path.read_bytes().split(b"\n") if line.strip())
    frame, warnings = parse(path)
    assert warnings == []
    assert frame.height == nonblank


def test_corpus_has_32_metrics_files():
    files = corpus_metrics_files()
    if not files:
        pytest.skip(CORPUS_MISSING)
    assert len(files) == 32


def test_corpus_act_prm_restart_is_a_second_segment():
    path = corpus_path(
        "act-prm-tinker/logs/act_prm_taubench_retail_100_fs1/Qwen3_4B_Instruct_2507/"
        "act-prm-tinker-isas=0-reru=0-enco=act_prm_taubench_retail_100_fs1-geco=aprm_qwen3_ap-trco=aprm_for_sft100-"
        "moco=hf_qwen3_4b_inst_2507-loco=r16_a32_qkvo-acon=1-hiob=1-grsi=4-basi=4-lera=0_001-nusu=1-se=42-re=1r1e03_bs4_gs4/metrics.jsonl"
    )
    frame, _ = parse(path)
    train = frame.filter(~pl.col("is_eval_row"))
    assert train["segment"].n_unique() == 2
    assert train.filter(pl.col("segment") == 1)["step"].min() == 0


def test_corpus_async_rl_eval_rows_reuse_step_numbers():
    frame, _ = parse(corpus_path("joanvelja-tinker-cookbook/reports/data/gptoss-20b-v3b-metrics.jsonl"))
    assert frame.height == 82
    assert frame.filter(pl.col("is_eval_row")).height == 7
    assert frame.filter(~pl.col("is_eval_row"))["segment"].n_unique() == 1
