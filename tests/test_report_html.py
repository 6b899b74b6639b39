"""The HTML report as a file: self-contained, safe with hostile input, within 10 MB at any run size."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from trace_doctor.decision import decide
from trace_doctor.humanize import format_seconds
from trace_doctor.model import (
    FRAMES_SCHEMA,
    LOG_EVENTS_SCHEMA,
    SPANS_SCHEMA,
    TASK_SNAPSHOTS_SCHEMA,
    Analysis,
    Finding,
    IngestWarning,
    InputFile,
    RuleOutcome,
    RunMeta,
    RunTables,
)
from trace_doctor.report.html import SIZE_BUDGET_BYTES, render_html, script_json, write_html

XSS = '<img src=x onerror="window.__pwned=1">'
DATA_BLOCK = re.compile(r'<script type="application/json" id="trace-doctor-data">(.*?)</script>', re.S)


def build_analysis(
    *,
    steps: int = 12,
    rollouts: int = 2,
    hostile: str | None = None,
    with_trace: bool = True,
    slow_step: int = 7,
) -> Analysis:
    """A realistic in-memory SL-like run: metrics, a trace with rollouts, dumps, a profile, logs and findings."""
    name = hostile or "sample_async"
    step_total = [30.0 if s == 0 else (19.0 if s == slow_step else 6.0 + 0.1 * (s % 5)) for s in range(steps)]
    metrics = pl.DataFrame(
        {
            "step": list(range(steps)),
            "segment": [0] * steps,
            "line": list(range(1, steps + 1)),
            "source": ["metrics.jsonl"] * steps,
            "superseded": [False] * steps,
            "is_eval_row": [False] * steps,
            "time/total": step_total,
            "time/get_batch": [t * 0.3 for t in step_total],
            "optim/kl_sample_train_v1": [0.03] + [0.002 + 0.0001 * s for s in range(1, steps)],
            "optim/kl_sample_train_v2": [0.025] + [0.001] * (steps - 1),
        },
        schema_overrides={"segment": pl.Int32},
    )
    step_times = pl.DataFrame(
        {
            "step": list(range(steps)),
            "total_s": step_total,
            "untimed_s": [t * 0.2 for t in step_total],
            "phase:get_batch": [t * 0.3 for t in step_total],
            "phase:train_step": [t * 0.5 for t in step_total],
        }
    )
    spans = _spans(step_total, rollouts, name) if with_trace else pl.DataFrame(schema=SPANS_SCHEMA)
    gap_step = min(3, steps - 1)
    gap_end = float(spans.filter(pl.col("step") == gap_step)["end_us"].max()) if with_trace else 0.0
    idle = [[gap_end - 2e6, gap_end - 0.5e6]] if with_trace else []
    findings = [
        Finding(
            rule="pipelining-gap",
            code="TD101",
            severity="error",
            title="Calls awaited one by one",
            message="forward_backward results are awaited before optim_step is submitted in 10 of 11 steps; "
            f"{hostile or 'pipelined'} would save 41 s.",
            fix="Submit optim_step right after forward_backward and await both results together.",
            steps=[gap_step],
            time_ranges_us=idle,
            evidence={"sequential_steps": 10, "span": hostile or "forward_backward_async"},
            seconds_lost=41.0,
            fraction_of_wall=0.31,
        ),
        Finding(
            rule="inconsistent-step-times",
            code="TD110",
            severity="warning",
            title="Step time spikes",
            message=f"Step {slow_step} took 19 s against a steady median of 6.2 s.",
            fix="Look for what else ran at that time.",
            steps=[slow_step],
            seconds_lost=12.8,
        ),
        Finding(
            rule="warmup-slowness",
            code="TD103",
            severity="info",
            title="Slow first step",
            message="Step 0 took 30 s, 4.8x the steady median.",
            fix="Nothing to do: warm-up.",
            steps=[0],
            seconds_lost=23.8,
        ),
    ]
    outcomes = [
        RuleOutcome("pipelining-gap", "fired", "1 finding(s)"),
        RuleOutcome("gil-stall", "not_applicable", "no GIL-monitor lines, task dumps or stack dumps"),
        RuleOutcome("kl-drift", "passed", "KL stayed below 0.01 after step 0"),
    ]
    run = RunTables(
        meta=RunMeta(
            path=f"/runs/{hostile or 'demo'}",
            trainer="sl",
            model_name=hostile or "Qwen/Qwen3-8B",
            renderer_name="qwen3",
        ),
        steps=metrics,
        spans=spans,
        frames=_frames(hostile),
        task_snapshots=_dumps(hostile),
        log_events=_logs(hostile),
        inputs=[
            InputFile("metrics", "metrics.jsonl", steps, 1),
            InputFile("trace", "trace_events.jsonl", len(spans) * 2, 0),
        ],
        warnings=[IngestWarning("metrics.jsonl", 14, f"not JSON: {hostile or 'truncated line'}")],
    )
    summary = {"wall_time_s": sum(step_total), "step_time_p50_s": 6.2, "steady_step_time_s": 6.2, "warmup_steps": 1}
    return decide(
        Analysis(
            run=run,
            findings=findings,
            outcomes=outcomes,
            summary=summary,
            derived={"step_times": step_times, "warmup_steps": 1},
        )
    )


def _spans(step_total: list[float], rollouts: int, name: str) -> pl.DataFrame:
    rows = []
    t = 473_726_495.0
    for step, total in enumerate(step_total):
        start, end = t, t + total * 1e6
        rows.append(("train_step", 0, 1, "MainThread", "main", start, end, 0, step))
        rows.append(("get_batch", 0, 1, "MainThread", "main", start, start + total * 0.3e6, 1, step))
        rows.append(
            (
                "forward_backward_async",
                0,
                1,
                "MainThread",
                "main",
                start + total * 0.3e6,
                start + total * 0.32e6,
                1,
                step,
            )
        )
        rows.append(
            ("optim_step_async", 0, 1, "MainThread", "main", start + total * 0.6e6, start + total * 0.61e6, 1, step)
        )
        for r in range(rollouts):
            rows.append(
                (name, 0, 100 + r, "MainThread", f"sample_task_{r}", start + 1e5 * r, start + total * 0.25e6, 0, step)
            )
        t = end + 2e5
    frame = pl.DataFrame(
        rows, schema=["name", "pid", "tid", "thread", "track", "start_us", "end_us", "depth", "step"], orient="row"
    )
    return frame.with_columns(
        (pl.col("end_us") - pl.col("start_us")).alias("dur_us"),
        pl.col("depth").cast(pl.Int32),
        pl.lit(0, pl.Int32).alias("segment"),
        pl.lit(True).alias("closed"),
        pl.lit("{}").alias("args"),
    ).select(list(SPANS_SCHEMA))


def _frames(hostile: str | None) -> pl.DataFrame:
    rows = [
        (1, None, 0, "<module>", "train.py", 1, 10.0, 0.1, False, False),
        (2, 1, 1, "main", "train.py", 40, 9.9, 0.2, True, False),
        (3, 2, 2, hostile or "model_dump", "pydantic/main.py", 400, 4.0, 3.9, False, False),
        (4, 2, 2, "[await]", "", None, 5.7, 5.7, False, True),
    ]
    frame = pl.DataFrame(
        rows,
        schema=[
            "frame_id",
            "parent_id",
            "depth",
            "function",
            "file_path",
            "line_no",
            "time_s",
            "self_time_s",
            "is_application_code",
            "synthetic",
        ],
        orient="row",
    )
    return frame.with_columns(
        pl.lit("profile.json").alias("profile"),
        pl.lit(None, pl.String).alias("class_name"),
        pl.lit(0.0).alias("await_time_s"),
        pl.col("depth").cast(pl.Int32),
    ).select(list(FRAMES_SCHEMA))


def _dumps(hostile: str | None) -> pl.DataFrame:
    rows, base = [], datetime(2026, 3, 5, 12, 0, 0)
    index = 0
    for second in range(40):
        for label in ("main", "holder"):
            if label == "holder" and 15 <= second < 27:
                continue  # the holder went silent
            rows.append(
                (
                    "dump.txt",
                    index,
                    base + timedelta(seconds=second),
                    label,
                    index,
                    1,
                    1.0,
                    hostile or "Task-1",
                    "pending",
                    "<coroutine object _result_async>",
                )
            )
            index += 1
    frame = pl.DataFrame(
        rows,
        schema=[
            "source",
            "line",
            "timestamp",
            "label",
            "snapshot",
            "task_count",
            "interval_s",
            "task_name",
            "state",
            "coroutine",
        ],
        orient="row",
    )
    return frame.with_columns(pl.col("timestamp").cast(pl.Datetime("us"))).select(list(TASK_SNAPSHOTS_SCHEMA))


def _logs(hostile: str | None) -> pl.DataFrame:
    rows = [
        (
            "logs.log",
            120,
            None,
            "tinker.lib.retry_handler",
            "ERROR",
            "error",
            f"Request failed with non-retryable error: {hostile or 'BadRequestError'}",
            "{}",
        )
    ]
    return pl.DataFrame(rows, schema=list(LOG_EVENTS_SCHEMA), orient="row").with_columns(
        pl.col("timestamp").cast(pl.Datetime("us"))
    )


def embedded_document(html: str) -> dict:
    match = DATA_BLOCK.search(html)
    assert match, "the JSON document block is missing"
    return json.loads(match.group(1))


def test_report_is_self_contained_with_plotly_inlined_once():
    from trace_doctor.report.html import plotly_source as get_plotlyjs

    html = render_html(build_analysis())
    assert html.count(get_plotlyjs()[:400]) == 1
    assert not re.findall(r"<(?:script|link|img|iframe)[^>]*\b(?:src|href)=", html)
    assert "default-src 'none'" in html  # the CSP forbids any fetch even if something tried
    # Only a fleet's per-run pages load plotly from a file; the single-run report allows no script source.
    assert "script-src 'unsafe-inline' 'unsafe-eval';" in html and "'self'" not in html
    assert 'id="plotly-missing"' not in html


def test_embedded_document_is_the_json_contract():
    result = build_analysis()
    document = embedded_document(render_html(result))
    assert document["schema_version"] == 1
    assert [f["rule"] for f in document["findings"]] == [f.rule for f in result.findings]
    assert document["findings"][0]["impact"]["seconds_lost"] == 41.0
    assert document["ingest_warnings"][0]["line"] == 14


def test_hostile_strings_cannot_end_the_data_block_or_become_markup(tmp_path: Path):
    hostile = XSS + "</script><script>window.__pwned=2</script>"
    result = build_analysis(hostile=hostile)
    path = tmp_path / "report.html"
    write_html(result, path)
    html = path.read_text(encoding="utf-8")
    assert "<img src=x" not in html
    assert "window.__pwned=2</script>" not in html
    document = embedded_document(html)
    assert document["run"]["model_name"] == hostile  # the JSON round-trips the text exactly
    assert "&lt;img src=x onerror=&#34;window.__pwned=1&#34;&gt;" in html  # jinja2-escaped in the page


def test_script_json_escapes_markup_characters():
    assert script_json({"a": "</script>&"}) == '{"a":"\\u003c/script\\u003e\\u0026"}'


def test_metrics_only_run_says_what_is_missing_and_still_draws_the_whole_run():
    html = render_html(build_analysis(with_trace=False))
    assert "No trace in this run." in html
    assert 'id="chart-step-time"' in html and 'id="chart-gantt"' not in html
    assert "Show steps" in html  # findings point at the step chart instead of the absent timeline


def test_finding_cards_are_ordered_and_carry_cost_fix_and_timeline_target():
    html = render_html(build_analysis())
    cards = re.findall(r'<article class="card sev-(\w+)" id="finding-(\d+)" data-rule="([\w-]+)"', html)
    assert [c[0] for c in cards] == ["error", "warning", "info"]
    assert "≈ 41 s lost · 31% of wall time" in html
    assert html.count('class="show-on-timeline" data-chart="chart-gantt"') >= 1


def test_summarised_data_is_named_in_the_report():
    html = render_html(build_analysis(steps=40))
    assert "What this report summarised" in html
    assert "The timeline draws" in html and "of 40 traced steps in full" in html


def _large_analysis(steps: int, spans_per_step: int) -> Analysis:
    small = build_analysis(steps=steps, rollouts=1, with_trace=False)
    origin = 1.0e9
    step_col = pl.int_range(0, steps * spans_per_step, eager=True) // spans_per_step
    index = pl.int_range(0, steps * spans_per_step, eager=True) % spans_per_step
    start = origin + step_col.cast(pl.Float64) * 7e6 + index.cast(pl.Float64) * (6e6 / spans_per_step)
    spans = pl.DataFrame(
        {
            "name": pl.Series(
                ["policy_sample", "env_step", "compute_group_rewards", "train_step"] * (steps * spans_per_step // 4 + 1)
            )[: steps * spans_per_step],
            "pid": pl.Series([0] * (steps * spans_per_step), dtype=pl.Int64),
            "tid": (index % 64).cast(pl.Int64),
            "thread": pl.Series(["MainThread"] * (steps * spans_per_step)),
            "track": ("Task-" + (index % 64).cast(pl.String)),
            "start_us": start,
            "end_us": start + 5e6 / spans_per_step * 40,
            "dur_us": pl.Series([5e6 / spans_per_step * 40] * (steps * spans_per_step)),
            "depth": pl.Series([1] * (steps * spans_per_step), dtype=pl.Int32),
            "step": step_col.cast(pl.Int64),
            "segment": pl.Series([0] * (steps * spans_per_step), dtype=pl.Int32),
            "closed": pl.Series([True] * (steps * spans_per_step)),
            "args": pl.Series(['{"track": "Task-1", "thread": "MainThread"}'] * (steps * spans_per_step)),
        }
    )
    small.run.spans = spans
    small.run.warnings = [
        IngestWarning("trace_events.jsonl", i, "unmatched E event with no open B on this track") for i in range(150_000)
    ]
    return small


def test_large_run_report_stays_within_budget(tmp_path: Path):
    result = _large_analysis(steps=3_000, spans_per_step=67)  # 201,000 spans
    assert len(result.run.spans) >= 200_000
    path = tmp_path / "large.html"
    write_html(result, path)
    size = path.stat().st_size
    assert size <= SIZE_BUDGET_BYTES, f"{size:,} bytes"
    html = path.read_text(encoding="utf-8")
    assert "What this report summarised" in html
    assert "of 3,000 traced steps in full" in html
    document = embedded_document(html)
    assert len(document["findings"]) == len(result.findings)  # findings are never cut
    assert "embedded_note" in document and len(document["ingest_warnings"]) < 150_000


@pytest.mark.parametrize("steps", [1, 2])
def test_tiny_runs_render(steps: int):
    html = render_html(build_analysis(steps=steps, slow_step=0))
    assert "trace-doctor-data" in html


FIGURE_BLOCK = r'<script type="application/json" class="figure-data" data-target="{}">(.*?)</script>'


def embedded_figure(html: str, chart_id: str) -> dict:
    match = re.search(FIGURE_BLOCK.format(re.escape(chart_id)), html, re.S)
    assert match, f"no figure for {chart_id}"
    return json.loads(match.group(1))


def _with_outlier(result: Analysis, step: int, seconds: float) -> Analysis:
    times = result.derived["step_times"]
    scale = pl.when(pl.col("step") == step).then(seconds / pl.col("total_s")).otherwise(1.0)
    result.derived["step_times"] = times.with_columns(
        [(pl.col(c) * scale).alias(c) for c in times.columns if c != "step"]
    )
    return result


def test_step_time_chart_opens_on_a_log_axis_only_when_outliers_squash_it():
    steady = embedded_figure(render_html(build_analysis(steps=30)), "chart-step-time")
    assert steady["layout"]["yaxis"]["type"] == "linear"
    # Like logs_v2p7: one step of 36,341 s among steps of a few seconds.
    html = render_html(_with_outlier(build_analysis(steps=30), 20, 36_341.0))
    outlier = embedded_figure(html, "chart-step-time")
    assert outlier["layout"]["yaxis"]["type"] == "log"
    assert outlier["layout"]["yaxis"]["title"]["text"] == "seconds (log scale)"
    assert "Opens on a log axis" in html and ">Log scale</button>" in html
    # The stacked breakdown cannot go log; it opens on the ordinary steps and marks the clipped one.
    phases = embedded_figure(html, "chart-phases")
    ceiling = phases["layout"]["yaxis"]["range"][1]
    assert 6.0 < ceiling < 100.0
    clipped = next(t for t in phases["data"] if t["name"] == "runs off the top")
    assert clipped["x"] == [20]


def test_phase_palette_has_no_severity_colours_and_no_two_names_share_one():
    import colorsys

    from trace_doctor.report.figures import SEVERITY_COLOUR, assign_phase_colours

    names = [
        "submit_batch",
        "get_batch",
        "finish_batch",
        "step",
        "forward_backward",
        "optim_step",
        "save_checkpoint",
        "save_checkpoint_async",
        "save_state",
        "save_weights_for_sampler",
        "sample",
        "sampling",
        "assemble",
        "assemble_training_data",
        "train",
        "train_step",
        "compute_kl_sample_train",
        "run_evals",
        "policy_sample",
        "env_step",
        "compute_group_rewards",
        "create_sampling_client",
        "do_train_step_and_get_sampling_client",
        "tokenize",
        "custom_phase",
        "another_phase",
    ]
    colours = assign_phase_colours(names)
    assert len(set(colours.values())) == len(names)
    for name, colour in colours.items():
        assert colour not in SEVERITY_COLOUR.values(), name
        r, g, b = (int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
        hue, lightness, saturation = colorsys.rgb_to_hls(r, g, b)
        degrees = hue * 360
        vivid = saturation > 0.3 and 0.2 < lightness < 0.85
        # Reds, oranges, ambers and yellows mean severity; greens mean healthy.
        assert not (vivid and (degrees < 65 or degrees > 330)), f"{name} {colour} looks like a severity"
        assert not (vivid and 80 < degrees < 160), f"{name} {colour} looks like 'healthy'"
    # The same name keeps its colour when other names come and go.
    assert assign_phase_colours(["get_batch"])["get_batch"] == colours["get_batch"]


def _sft_nested_analysis() -> Analysis:
    result = build_analysis(steps=6, with_trace=False)
    submit = [1.0, 1.2, 4.0, 1.1, 1.0, 1.0]
    inner = [0.3, 0.4, 3.5, 0.3, 1.4, None]  # step 4: the nested timer reads more than its parent
    finish = [0.5] * 6
    result.derived["step_times"] = pl.DataFrame(
        {
            "step": list(range(6)),
            "total_s": [s + f + 0.2 for s, f in zip(submit, finish, strict=True)],
            "untimed_s": [0.2] * 6,
            "phase:finish_batch": finish,
            "phase:submit_batch": submit,
            "inner:get_batch": inner,
        }
    )
    return result


def test_nested_get_batch_is_drawn_inside_submit_batch_without_double_counting():
    figure = embedded_figure(render_html(_sft_nested_analysis()), "chart-phases")
    traces = {t["name"]: t["y"] for t in figure["data"]}
    assert "submit_batch" not in traces and "get_batch" not in traces
    inner, rest = traces["get_batch (in submit_batch)"], traces["submit_batch (rest)"]
    assert inner[2] == pytest.approx(3.5) and rest[2] == pytest.approx(0.5)
    assert inner[4] == pytest.approx(1.0) and rest[4] == pytest.approx(0.0)  # clipped to its parent
    assert inner[5] is None and rest[5] == pytest.approx(1.0)
    submit = [1.0, 1.2, 4.0, 1.1, 1.0, 1.0]
    for step in range(6):
        stacked = sum(v[step] or 0.0 for v in traces.values())
        assert stacked == pytest.approx(submit[step] + 0.5 + 0.2)  # parts add up to the step, once


def test_healthy_run_says_so_and_lists_what_was_checked():
    result = build_analysis()
    result.findings = []
    result.outcomes = [
        RuleOutcome("pipelining-gap", "passed", "fb→optim back to back on 30/30 steps"),
        RuleOutcome("gil-stall", "passed", "no sign of a blocked thread in trace"),
        RuleOutcome("kl-drift", "not_applicable", "no optim/kl_sample_train_v1/_v2 in metrics: not an RL run"),
    ]
    html = render_html(decide(result))
    assert 'class="verdict sev-ok"' in html
    assert "✓ No problems found" in html
    assert "fb→optim back to back on 30/30 steps" in html
    assert 'id="chart-step-time"' in html and 'id="chart-gantt"' in html


def test_silence_from_rules_that_could_not_run_is_not_called_healthy():
    result = build_analysis(with_trace=False)
    result.findings = []
    result.outcomes = [RuleOutcome("warmup-slowness", "passed", "no slow warm-up prefix")] + [
        RuleOutcome(rule, "not_applicable", "missing input") for rule in ("gil-stall", "kl-drift", "pipelining-gap")
    ]
    html = render_html(decide(result))
    assert 'class="verdict sev-limited"' in html and 'class="verdict sev-ok"' not in html
    assert "only 1 of 4 rules had the input they need" in html


def test_long_names_in_the_header_keep_their_full_text_on_hover():
    result = build_analysis()
    result.run.meta.model_name = "Qwen/Qwen3-30B-A3B-Instruct-2507-with-a-long-suffix"
    html = render_html(result)
    assert '<dd class="name" title="Qwen/Qwen3-30B-A3B-Instruct-2507-with-a-long-suffix">' in html


# ---- findings on the timeline: own colour, own lane, same swatch on the card ---------------------


def _lane_traces(figure: dict) -> list[dict]:
    return [t for t in figure["data"] if (t.get("meta") or {}).get("finding") is not None]


def _swatch_colours(html: str) -> dict[int, str]:
    """Finding index -> the background colour of the swatch on its card's "show on timeline" button."""
    colours = {}
    for index, card in re.findall(r'<article class="card[^"]*" id="finding-(\d+)"(.*?)</article>', html, re.S):
        swatch = re.search(r'<span class="finding-swatch[^"]*" style="background-color: (#[0-9A-Fa-f]{6})', card)
        if swatch:
            colours[int(index)] = swatch.group(1)
    return colours


def test_each_finding_on_the_timeline_has_its_own_colour_lane_and_the_same_swatch_on_its_card():
    from trace_doctor.report.timeline_figure import FINDING_COLOURS

    result = build_analysis(steps=12)
    html = render_html(result)
    lanes = _lane_traces(embedded_figure(html, "chart-gantt"))
    colour_of = {t["meta"]["finding"]: t["marker"]["color"] for t in lanes}
    # All three findings are on the timeline: pipelining-gap by its idle range, the other two by
    # the steps they name (drawn hatched, a whole step each).
    assert sorted(colour_of) == [0, 1, 2]
    assert len(set(colour_of.values())) == 3
    assert set(colour_of.values()) <= set(FINDING_COLOURS)
    assert _swatch_colours(html) == colour_of
    lane_of = {t["meta"]["finding"]: set(t["y"]) for t in lanes}
    assert all(len(ys) == 1 for ys in lane_of.values())
    assert len({ys.pop() for ys in lane_of.values()}) == 3, "two findings share a lane"
    by_finding = {t["meta"]["finding"]: t for t in lanes}
    assert "pattern" not in by_finding[0]["marker"] and by_finding[1]["marker"]["pattern"]["shape"] == "/"
    # The measured range is also shaded behind the spans, in the same colour and named for the page.
    shading = [s for s in embedded_figure(html, "chart-gantt")["layout"]["shapes"] if s.get("name") == "finding-0"]
    assert len(shading) == 1 and shading[0]["fillcolor"].startswith("rgba(230, 159, 0,")


def test_findings_off_the_timeline_get_no_colour():
    result = build_analysis(steps=12)
    result.findings[1].steps = []  # names no step: nothing to mark on the Gantt
    html = render_html(result)
    colours = {t["meta"]["finding"]: t["marker"]["color"] for t in _lane_traces(embedded_figure(html, "chart-gantt"))}
    assert sorted(colours) == [0, 2]
    assert _swatch_colours(html) == colours
    assert len(set(colours.values())) == 2
    # Without a trace there are no lanes and no swatches; the cards still point at the step chart.
    bare = render_html(build_analysis(with_trace=False))
    assert _swatch_colours(bare) == {} and 'class="lane-key"' not in bare


def _simulated_lab(hex_colour: str, matrix: tuple) -> tuple[float, float, float]:
    """CIELAB of a colour as seen with a colour-vision deficiency (Machado et al. 2009, severity 1)."""

    def linear(c: int) -> float:
        c = c / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    rgb = [linear(int(hex_colour[i : i + 2], 16)) for i in (1, 3, 5)]
    r, g, b = (min(max(sum(row[k] * rgb[k] for k in range(3)), 0.0), 1.0) for row in matrix)
    x, y, z = (
        0.4124 * r + 0.3576 * g + 0.1805 * b,
        0.2126 * r + 0.7152 * g + 0.0722 * b,
        0.0193 * r + 0.1192 * g + 0.9505 * b,
    )

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116

    fx, fy, fz = f(x / 0.95047), f(y), f(z / 1.08883)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


CVD_MATRICES = {
    "protanopia": ((0.152286, 1.052583, -0.204868), (0.114503, 0.786281, 0.099216), (-0.003882, -0.048116, 1.051998)),
    "deuteranopia": ((0.367322, 0.860646, -0.227968), (0.280085, 0.672501, 0.047413), (-0.011820, 0.042940, 0.968881)),
    "tritanopia": ((1.255528, -0.076749, -0.178779), (-0.078411, 0.930809, 0.147602), (0.004733, 0.691367, 0.303900)),
}


@pytest.mark.parametrize("deficiency", sorted(CVD_MATRICES))
def test_finding_colours_stay_apart_for_colour_blind_readers(deficiency: str):
    import itertools
    import math

    from trace_doctor.report.timeline_figure import FINDING_COLOURS

    matrix = CVD_MATRICES[deficiency]
    closest = min(
        (math.dist(_simulated_lab(a, matrix), _simulated_lab(b, matrix)), a, b)
        for a, b in itertools.combinations(FINDING_COLOURS, 2)
    )
    # Okabe-Ito's closest pair is ~16 ΔE76 apart; plotly's default (tab10) palette has pairs at 5.
    assert closest[0] > 12, closest


def test_swatch_numbers_are_legible_on_their_colour():
    from trace_doctor.report.timeline_figure import FINDING_COLOURS, ink_on

    assert ink_on("#F0E442") == "#000000" and ink_on("#0072B2") == "#ffffff" and ink_on("#000000") == "#ffffff"
    assert {ink_on(c) for c in FINDING_COLOURS} == {"#000000", "#ffffff"}


# ---- Gantt row labels: wrapped or shortened, never clipped ---------------------------------------


def test_row_labels_wrap_at_the_thread_track_separator_and_never_exceed_their_width():
    from trace_doctor.report.timeline_figure import label_lines

    assert label_lines("MainThread · main") == ["MainThread · main"]
    assert label_lines("MainThread · main", split=True) == ["MainThread", "main"]
    assert label_lines("ThreadPoolExecutor-0_0 · Task-12") == ["ThreadPoolExecutor-0_0", "Task-12"]
    # A long thread name never pushes the track (what tells rows apart) off the label.
    assert label_lines("ThreadPoolExecutor-0_0 worker with a long name · sample_task_1") == [
        "ThreadPoolExec…ng name",
        "sample_task_1",
    ]
    one_word = "do_group_rollout_and_filter_constant_reward_groups"
    lines = label_lines(one_word)
    assert lines == ["do_group_rollout_and_", "filter_constan…_groups"]
    # Tracks that share a long head (async RL's rollout workers) keep the end that tells them apart.
    workers = [label_lines(f"MainThread · trajectory_group_worker_loop_{i}", split=True)[1] for i in range(8)]
    assert len(set(workers)) == 8
    assert workers[3] == "trajectory_gro…_loop_3"
    assert label_lines("MainThread · trajectory_group_worker_loop_3", 12, split=True)[1] == "traject…op_3"
    for label in (one_word, "a · " + one_word, "x" * 300, "pid 12 · ?"):
        for width in (12, 22):
            assert all(len(line) <= width for line in label_lines(label, width)), (label, width)
            assert 1 <= len(label_lines(label, width)) <= 2


def test_gantt_keeps_full_row_names_for_tooltips_and_sizes_its_margin_to_the_labels():
    result = build_analysis(steps=6)
    long_track = "do_group_rollout_and_filter_constant_reward_groups_for_policy_0"
    result.run.spans = result.run.spans.with_columns(
        pl.when(pl.col("track") == "sample_task_0").then(pl.lit(long_track)).otherwise(pl.col("track")).alias("track")
    )
    figure = embedded_figure(render_html(result), "chart-gantt")
    layout = figure["layout"]
    full = f"MainThread · {long_track}"
    assert full in layout["yaxis"]["tickvals"]  # the category is the full name (every bar's hover shows it)
    shown = layout["yaxis"]["ticktext"][layout["yaxis"]["tickvals"].index(full)]
    assert shown == "MainThread<br>do_group_rollo…olicy_0"
    assert layout["meta"]["row_tooltips"]["MainThreaddo_group_rollo…olicy_0"] == full
    assert layout["yaxis"]["automargin"] is True
    widest = max(len(line) for tick in layout["yaxis"]["ticktext"] for line in tick.split("<br>"))
    assert layout["margin"]["l"] >= widest * 6  # room for the longest line at the 11 px tick font
    narrow = layout["meta"]["narrow"]
    assert all(len(line) <= 12 for tick in narrow["ticktext"] for line in tick.split("<br>"))
    assert narrow["margin_l"] < layout["margin"]["l"]


# ---- the diagnosis: symptoms under their causes, the time account ---------------------------------


def _triaged_analysis() -> Analysis:
    """build_analysis with the triage's output: a steady-slowness symptom explained by pipelining-gap,
    and the account of the run's wall time (numbers as the triage writes them)."""
    result = build_analysis(steps=12)
    pipelining, spikes, warmup = result.findings
    pipelining.fingerprint = "pipelining-gap:sequential-fb-optim"
    symptom = Finding(
        rule="steady-slowness",
        code="TD104",
        severity="warning",
        title="Every steady step is slower than the work needs",
        message="Steady steps take 6.2 s: 40% of each step is client-side work outside the result wait.",
        fix="Pipeline submissions.",
        evidence={"own_estimate_s": 30.0},
        fingerprint="steady-slowness:client",
        explained_by=["pipelining-gap:sequential-fb-optim"],
    )
    result.findings = [pipelining, spikes, warmup, symptom]
    wall = result.summary["wall_time_s"]
    result.summary["account"] = {
        "wall_time_s": wall,
        "wall_basis": "trace extent per launch",
        "useful_service_s": 40.0,
        "useful_basis": "union of result-wait spans in the trace",
        "causes": [
            {
                "finding": "pipelining-gap:sequential-fb-optim",
                "rule": "pipelining-gap",
                "title": pipelining.title,
                "kind": "loss",
                "seconds": 41.0,
                "share": 41.0 / wall,
                "confidence": "high",
            },
            {
                "finding": "warmup-slowness",
                "rule": "warmup-slowness",
                "title": warmup.title,
                "kind": "benign",
                "seconds": 23.8,
                "share": 23.8 / wall,
                "confidence": None,
            },
        ],
        "lost_s": 41.0,
        "unexplained_s": wall - 40.0 - 41.0 - 23.8,
        "counterfactual": {
            "seconds": wall - 41.0,
            "range_s": [wall - 41.0, wall - 20.5],
            "speedup": wall / (wall - 41.0),
            "floor_s": 0.0,
            "clock_cycle_s": None,
            "note": "low end: every fix works",
        },
    }
    return decide(result)


def _card_order(html: str) -> list[tuple[str, str]]:
    return re.findall(
        r'<article class="card sev-\w+" id="finding-(\d+)" data-rule="[\w-]+" data-finding="\d+" '
        r'data-depth="(\d)"',
        html,
    )


def test_a_symptom_is_shown_under_the_cause_that_explains_it():
    result = _triaged_analysis()
    html = render_html(result)
    # Finding 3 (steady-slowness) reads right after finding 0 (pipelining-gap), one level in.
    assert _card_order(html) == [("0", "0"), ("3", "1"), ("1", "0"), ("2", "0")]
    symptom = re.search(r'id="finding-3".*?</article>', html, re.S).group(0)
    assert (
        'A symptom, explained by <a href="#finding-0">#1 TD101 pipelining-gap</a>: its time is counted there.'
        in symptom
    )
    assert "lost" not in re.search(r'<header class="card-head">.*?</header>', symptom, re.S).group(0)
    # Cards are numbered in reading order; the glance list says where a symptom's time went.
    assert re.findall(r'<span class="finding-swatch[^"]*"[^>]*>(\d+)</span>', html)[:4] == ["1", "2", "3", "4"]
    assert '<span class="glance-cost">in #1</span>' in html
    # The JSON document keeps its own order and carries explained_by as the analysis wrote it.
    document = embedded_document(html)
    assert document["findings"][3]["explained_by"] == ["pipelining-gap:sequential-fb-optim"]


def test_time_account_is_a_stacked_bar_and_a_table_near_the_verdict():
    result = _triaged_analysis()
    html = render_html(result)
    account = re.search(r'<div class="account" id="time-account">.*?<p class="sub">.*?</p>', html, re.S)
    assert account, "no time account"
    block = account.group(0)
    assert html.index('class="verdict') < html.index('id="time-account"') < html.index('id="findings"')
    segments = re.findall(
        r'<span class="seg[^"]*" style="width: ([\d.]+)%; background-color: (#[0-9A-Fa-f]{6})" '
        r'title="([^"]*)"',
        block,
    )
    labels = [title.split(":")[0] for _, _, title in segments]
    assert labels == ["service work", "#1 pipelining-gap", "#4 warmup-slowness", "unexplained"]
    assert sum(float(w) for w, _, _ in segments) == pytest.approx(100.0, abs=0.01)  # the parts fill the wall time
    wall = result.summary["wall_time_s"]
    assert float(segments[1][0]) == pytest.approx(100 * 41.0 / wall, abs=0.001)
    # Each cause's segment has its finding's colour, the colour of the chip on its card.
    chips = dict((i, c) for i, c in _swatch_colours_any(html).items())
    assert segments[1][1] == chips[0] and segments[2][1] == chips[2]
    assert len({c for _, c, _ in segments}) == 4
    assert "(expected, not a problem to fix)" in block
    low, high = result.summary["account"]["counterfactual"]["range_s"]
    assert f"≈ {format_seconds(low)}–{format_seconds(high)}" in block
    assert f"(up to {wall / low:.1f}× faster)" in block


def _swatch_colours_any(html: str) -> dict[int, str]:
    """Finding index -> the colour of the number chip on its card."""
    return {
        int(i): c
        for i, c in re.findall(
            r'id="finding-(\d+)"[^>]*>\s*(?:<p class="explained">.*?</p>\s*)?<header class="card-head">\s*'
            r'<span class="finding-swatch[^"]*" style="background-color: (#[0-9A-Fa-f]{6})',
            html,
            re.S,
        )
    }


def test_no_account_no_panel():
    html = render_html(build_analysis())
    assert 'id="time-account"' not in html


def test_backticked_names_in_a_message_are_code_and_stay_inert():
    from trace_doctor.report.html import code_spans

    assert str(code_spans("`optim/entropy` fell")) == "<code>optim/entropy</code> fell"
    hostile = code_spans("<img src=x onerror=alert(1)> `</code><script>alert(1)</script>` `tail")
    assert "<script>" not in hostile and "<img" not in hostile
    assert "<code>&lt;/code&gt;&lt;script&gt;alert(1)&lt;/script&gt;</code>" in hostile
    assert hostile.endswith("`tail")  # an unpaired backtick opens nothing


def test_bidi_and_zero_width_characters_from_the_run_are_shown_not_obeyed(tmp_path: Path):
    # U+202E would display "gnp.exe" as "exe.png"; a zero-width space hides itself. Shown as escapes,
    # as the text report shows them; the JSON keeps the text exactly.
    hostile = "qwen\u202egnp.exe\u200b"
    result = build_analysis(hostile=hostile)
    path = tmp_path / "report.html"
    write_html(result, path)
    html = path.read_text(encoding="utf-8")
    page = re.sub(r"<script.*?</script>", "", html, flags=re.S)  # what the page shows as text
    assert "\u202e" not in page and "\u200b" not in page
    assert "qwen\\u202egnp.exe\\u200b" in page
    assert embedded_document(html)["run"]["model_name"] == hostile


def test_gantt_labels_and_hovers_show_bidi_characters_as_escapes():
    # Plotly draws row labels, hover boxes and tooltips from the figure's data in the page's script,
    # which the text-only check above skips: a track named with U+202E would read reversed there.
    result = build_analysis(steps=6)
    hostile = "sample\u202etask\u200b"
    result.run.spans = result.run.spans.with_columns(
        pl.when(pl.col("track") == "sample_task_0").then(pl.lit(hostile)).otherwise(pl.col("track")).alias("track"),
        pl.when(pl.col("name") == "sample_async").then(pl.lit(hostile)).otherwise(pl.col("name")).alias("name"),
    )
    figure = embedded_figure(render_html(result), "chart-gantt")
    drawn = json.dumps(figure, ensure_ascii=False)
    assert "\u202e" not in drawn and "\u200b" not in drawn
    assert "MainThread · sample\\u202etask\\u200b" in figure["layout"]["yaxis"]["tickvals"]
    hovers = [text for trace in figure["data"] for text in trace.get("hovertext") or []]
    assert any("<b>sample\\u202etask\\u200b</b>" in text for text in hovers)


def test_an_rl_gantt_without_sampling_spans_says_sampling_took_most_of_the_step(tmp_path):
    import shutil

    from conftest import fixture_run

    from trace_doctor.api import analyze, load_run

    run = tmp_path / "run"
    shutil.copytree(fixture_run("rl_healthy"), run)
    # The same run traced without its sampling: the loop's phase, the rollouts and the sample calls dropped.
    dropped = {"sampling", "do_group_rollout_and_filter_constant_reward", "policy_sample", "sample"}
    lines = (run / "trace_events.jsonl").read_text().splitlines()
    kept = [line for line in lines if json.loads(line).get("name") not in dropped]
    (run / "trace_events.jsonl").write_text("\n".join(kept) + "\n")
    # ... and a slower sampler, so that sampling is most of each step (0.3 s of 0.5 s).
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row["time/total"] += 0.2
        row["time/sampling"] += 0.2
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    html = render_html(analyze(load_run(run)))
    assert "The trace has no sampling spans, but the metrics say sampling took" in html
    # With its sampling traced, the chart draws it and says nothing.
    assert "The trace has no sampling spans" not in render_html(analyze(load_run(fixture_run("rl_healthy"))))
