"""The HTML report's Training health view: which panels a run gets, where findings are marked, size."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from conftest import fixture_run

from fixtures.training_gen.rows import group_shares, rl_row, sft_row, write_run
from trace_doctor.api import analyze, load_run
from trace_doctor.derive.training_health import health_panels, panels_of_finding
from trace_doctor.model import Finding
from trace_doctor.report.health_view import plan
from trace_doctor.report.html import render_html
from trace_doctor.rules.catalogue import panels_of_rule

ROOT = Path(__file__).resolve().parents[1]
TRAINING = ROOT / "fixtures" / "training"
FIGURE = re.compile(r'<script type="application/json" class="figure-data" data-target="([^"]+)">(.*?)</script>', re.S)


def figures(html: str) -> dict[str, dict]:
    return {target: json.loads(text) for target, text in FIGURE.findall(html)}


def panel_ids(columns, config=None) -> list[str]:
    return [p.id for p in health_panels(columns, config)]


def series_of(columns, panel_id: str, config=None) -> list[tuple[str, str]]:
    (panel,) = [p for p in health_panels(columns, config) if p.id == panel_id]
    return [(s.column, s.role) for s in panel.series]


# ---- which panels and series (derive side) ----------------------------------------------------


def test_rl_keys_fill_every_rl_panel_and_eval_keys_stay_eval():
    columns = [
        "step",
        "env/all/reward/total",
        "env/all/by_group/frac_mixed",
        "env/all/by_group/frac_all_good",
        "env/all/by_group/frac_all_bad",
        "env/all/stop/max_tokens",
        "env/all/ac_tokens_per_turn",
        "optim/entropy",
        "optim/kl_sample_train_v1",
        "optim/kl_sample_train_v2",
        "test/env/all/reward/total",
        "test/env/all/by_group/frac_mixed",
        "time/total",
    ]
    assert panel_ids(columns) == ["reward", "groups", "entropy", "kl", "truncation"]
    assert series_of(columns, "reward") == [("env/all/reward/total", "train"), ("test/env/all/reward/total", "eval")]
    # test/… groups are an eval's, never drawn as the training share.
    assert all(role == "train" and not c.startswith("test/") for c, role in series_of(columns, "groups"))
    assert series_of(columns, "kl")[0] == ("optim/kl_sample_train_v2", "train")  # the one the rules judge
    assert series_of(columns, "truncation") == [("env/all/stop/max_tokens", "train")]


def test_key_families_not_one_spelling():
    # Env tags without env/all, the rl_loop recipe's bare reward, async 0.6.1's eval aliases left out.
    tagged = ["env/math/reward/total", "env/code/reward/total", "eval/by_step/test/env/all/reward/total"]
    assert series_of(tagged, "reward") == [("env/code/reward/total", "train"), ("env/math/reward/total", "train")]
    assert series_of(["reward/total", "progress/batch"], "reward") == [("reward/total", "train")]
    # Truncation from completion length when only the config's max_tokens says where the cut is.
    lengths = ["env/all/ac_tokens_per_turn"]
    assert panel_ids(lengths) == []
    (panel,) = health_panels(lengths, {"max_tokens": 2048})
    assert (panel.id, panel.limit) == ("truncation", 2048.0)
    # Distillation: teacher KL is drawn with the sampler-trainer KL.
    assert ("teacher_kl", "train") in series_of(["teacher_kl", "optim/kl_sample_train_v2"], "kl")


def test_sft_and_dpo_get_their_loss_and_nothing_else():
    assert series_of(["train_mean_nll", "test/nll", "learning_rate"], "loss") == [
        ("train_mean_nll", "train"),
        ("test/nll", "eval"),
    ]
    assert panel_ids(["train_mean_nll", "test/nll", "learning_rate"]) == ["loss"]
    assert panel_ids(["dpo_loss", "accuracy", "margin", "test/nll"]) == ["loss"]
    # An SFT run that logged no NLL (only timings and counts) has no training-health view.
    assert panel_ids(["num_tokens", "learning_rate", "time/total", "progress"]) == []


def test_a_finding_is_marked_where_its_evidence_metric_is_drawn():
    panels = health_panels(["optim/entropy", "optim/kl_sample_train_v2", "train_mean_nll"])

    def marked(slug: str, evidence: dict) -> list[str]:
        return panels_of_finding(evidence, panels, panels_of_rule(slug))

    assert marked("training-instability", {"metric": "optim/entropy"}) == ["entropy"]
    assert marked("training-instability", {}) == ["loss", "kl", "entropy"]
    assert marked("kl-drift", {"column": "optim/kl_sample_train_v2"}) == ["kl"]
    assert marked("constant-reward-groups", {}) == []  # no groups panel: nowhere
    assert marked("pipelining-gap", {"metric": "time/total"}) == []


# ---- the rendered view ----------------------------------------------------------------------------


def test_renderer_kl_step0_is_marked_on_the_kl_panel_in_its_card_colour():
    result = analyze(load_run(fixture_run("rl_kl_step0")))
    (index,) = [i for i, f in enumerate(result.findings) if f.rule == "renderer-kl-step0"]
    html = render_html(result)
    kl = figures(html)["chart-health-kl"]
    shades = [s for s in kl["layout"]["shapes"] if s.get("name") == f"finding-{index}"]
    assert [(s["x0"], s["x1"]) for s in shades] == [(-0.5, 0.5)]  # step 0
    (chip,) = [t for t in kl["data"] if (t.get("meta") or {}).get("finding") == index]
    card = re.search(rf'id="finding-{index}"[^>]*--finding-colour: (#[0-9A-Fa-f]{{6}})', html)
    assert card and chip["marker"]["color"] == shades[0]["fillcolor"] == card.group(1)
    assert chip["x"] == [0] and chip["text"] == [chip["text"][0]] and chip["text"][0].isdigit()
    # The card's button goes to the health panel; the band is the policy's stable KL.
    assert re.search(rf'data-chart="chart-health-kl" data-finding="{index}"', html)
    assert "Show on training health" in html
    assert any(s.get("y1") == 0.01 and s["type"] == "rect" for s in kl["layout"]["shapes"])


def test_new_quality_rules_are_marked_on_their_panels():
    """Synthetic findings of the rules written on other branches, keyed on their slugs and generic fields."""
    result = analyze(load_run(TRAINING / "rl_sync_healthy"))
    base = len(result.findings)

    def finding(rule, code, steps, evidence):
        return Finding(rule, code, "warning", f"{rule} shape", "numbers", "fix it", steps=steps, evidence=evidence)

    result.findings += [
        finding("constant-reward-groups", "TD203", list(range(30, 60)), {"metric": "env/all/by_group/frac_mixed"}),
        finding("entropy-collapse", "TD205", list(range(40, 60)), {}),
        finding("truncated-samples", "TD207", [5, 6, 7, 20], {"metric": "env/all/stop/max_tokens"}),
        finding("training-instability", "TD206", [17], {"metric": "optim/entropy", "value": "NaN"}),
        finding("config-risk", "TD209", [], {"setting": "temperature"}),
    ]
    drawn = figures(render_html(result))

    def marked(chart: str) -> dict[int, list[tuple[float, float]]]:
        out: dict[int, list[tuple[float, float]]] = {}
        for shape in drawn[chart]["layout"].get("shapes", []):
            if (m := re.fullmatch(r"finding-(\d+)", shape.get("name") or "")) is not None:
                out.setdefault(int(m.group(1)), []).append((shape["x0"], shape["x1"]))
        return out

    assert marked("chart-health-groups") == {base: [(29.5, 59.5)], base + 1: [(39.5, 59.5)]}
    assert marked("chart-health-entropy") == {base + 1: [(39.5, 59.5)], base + 3: [(16.5, 17.5)]}
    assert marked("chart-health-truncation") == {base + 2: [(4.5, 7.5), (19.5, 20.5)]}
    assert base + 4 not in {i for chart in drawn if chart.startswith("chart-health-") for i in marked(chart)}
    # Every marked finding has its own colour; two marks of one finding share it.
    colours = {
        shape["name"]: shape["fillcolor"]
        for chart in drawn
        if chart.startswith("chart-health-")
        for shape in drawn[chart]["layout"].get("shapes", [])
        if shape.get("name")
    }
    assert len(set(colours.values())) == len(colours)


def test_no_view_without_health_metrics(tmp_path):
    run = tmp_path / "sft_no_nll"
    rows = [{"step": s, "num_tokens": 1000, "learning_rate": 1e-4, "time/total": 2.0} for s in range(20)]
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    html = render_html(analyze(load_run(run)))
    assert 'id="training-health"' not in html and "chart-health-" not in html
    sft = render_html(analyze(load_run(TRAINING / "sft_healthy")))
    assert set(k for k in figures(sft) if k.startswith("chart-health-")) == {"chart-health-loss"}


@pytest.fixture(scope="module")
def long_run(tmp_path_factory) -> Path:
    """A 10,000-step sync RL run in the cookbook's key set."""
    rng = random.Random(7)
    rows = []
    for step in range(10_000):
        mixed, good, bad = group_shares(rng, 32, 0.1, 0.2)
        rows.append(
            rl_row(
                step,
                n_steps=10_000,
                rng=rng,
                reward=0.3 + 0.4 * step / 10_000,
                frac_mixed=mixed,
                frac_all_good=good,
                frac_all_bad=bad,
                entropy=0.4,
                kl_v1=1e-3,
                kl_v2=6e-4,
                ac_tokens_per_turn=600.0,
                stop={"completed": 0.99, "max_tokens": 0.01},
            )
        )
    out = tmp_path_factory.mktemp("long") / "rl_10k"
    write_run(out, metrics=rows, config={"max_tokens": 2048, "model_name": "Qwen/Qwen3-8B"}, expected={})
    return out


def test_a_long_run_is_binned_and_stays_small(long_run):
    result = analyze(load_run(long_run))
    html = render_html(result)
    health = {k: v for k, v in figures(html).items() if k.startswith("chart-health-")}
    assert set(health) == {
        "chart-health-reward",
        "chart-health-groups",
        "chart-health-entropy",
        "chart-health-kl",
        "chart-health-truncation",
    }
    points = sum(len(trace["x"]) for fig in health.values() for trace in fig["data"])
    assert points <= 5 * 3 * 1000  # every series binned to at most its share of the budget
    assert "averages every" in html and "Training health" in html
    assert sum(len(json.dumps(fig)) for fig in health.values()) < 1_500_000


def test_sft_row_builder_nll_is_drawn(tmp_path):
    """An SFT run's NLL with eval points: both series present, eval only on eval steps."""
    rng = random.Random(3)
    rows = [
        sft_row(s, n_steps=30, rng=rng, train_nll=1.0 - s / 60, test_nll=0.9 if s % 10 == 0 else None)
        for s in range(30)
    ]
    write_run(tmp_path / "sft", metrics=rows, config={"model_name": "Qwen/Qwen3-8B"}, expected={})
    loss = figures(render_html(analyze(load_run(tmp_path / "sft"))))["chart-health-loss"]
    by_name = {trace["name"]: trace for trace in loss["data"]}
    assert len(by_name["train_mean_nll"]["x"]) == 30
    assert by_name["eval test/nll"]["x"] == [0, 10, 20]


def test_kl_drift_is_shaded_over_the_steps_it_names():
    """The real kl-drift rule on a run whose KL leaves the stable band at step 5 and stays out."""
    from rule_helpers import run_from_rows

    rows = [
        {"step": i, "progress/batch": i, "env/all/reward/total": 0.5, "optim/kl_sample_train_v2": v}
        for i, v in enumerate([1e-4] * 5 + [0.04] * 15)
    ]
    result = analyze(run_from_rows(rows))
    (index,) = [i for i, f in enumerate(result.findings) if f.rule == "kl-drift"]
    drift = result.findings[index]
    kl = figures(render_html(result))["chart-health-kl"]
    shaded = [(s["x0"], s["x1"]) for s in kl["layout"]["shapes"] if s.get("name") == f"finding-{index}"]
    assert drift.steps and shaded == [(min(drift.steps) - 0.5, max(drift.steps) + 0.5)]
    assert min(drift.steps) >= 5


def test_recorded_sampler_saves_line_up_with_the_kl_panel():
    # A sampler refreshed only at saves: the KL resets at each recorded save, drawn as lines there.
    run = Path(__file__).resolve().parent.parent / "fixtures" / "training" / "rl_sync_stale_sawtooth"
    result = analyze(load_run(run))
    (kl,) = [p for p in plan(result, 0.01).panels if p.id == "kl"]
    recorded = [json.loads(line)["batch"] for line in (run / "checkpoints.jsonl").read_text().splitlines()]
    assert list(kl.events_at) == sorted(b for b in recorded if b is not None)
    assert kl.events_label == "sampler weights saved"
    assert "sampler weights saved" in render_html(result)
    # A run without checkpoints draws no save lines.
    (plain,) = [p for p in health_panels(["optim/kl_sample_train_v2"]) if p.id == "kl"]
    assert plain.events_at == ()
