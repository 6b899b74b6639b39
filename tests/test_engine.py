"""The rule engine: outcomes, error containment, select/ignore, config overrides, ordering."""

from __future__ import annotations

import polars as pl
import pytest
from conftest import fixture_run
from rule_helpers import run_from_rows

from trace_doctor.api import load_run
from trace_doctor.knowledge.tinker import TRAINING_SUBMIT_CALLS
from trace_doctor.model import Finding
from trace_doctor.policy import PolicyError
from trace_doctor.policy.timing import PipeliningGapPolicy
from trace_doctor.rules.base import REGISTRY, NotApplicable, Rule, RuleDocs
from trace_doctor.rules.context import RuleContext
from trace_doctor.rules.engine import run_one, run_rules
from trace_doctor.settings import load_settings

DOCS = RuleDocs("w", "y", "e", "f")


def _rule(check):
    return Rule(
        slug="pipelining-gap",
        code="TD101",
        title="t",
        severity="warning",
        needs="n",
        docs=DOCS,
        check=check,
        policy=PipeliningGapPolicy,
        stage="pipelining",
    )


def _rl_run(kl=0.05):
    return run_from_rows(
        [{"step": i, "progress/batch": i, "optim/kl_sample_train_v2": kl, "time/total": 10.0} for i in range(10)]
    )


def test_exception_in_a_rule_becomes_an_error_outcome():
    def broken(ctx):
        raise ZeroDivisionError("boom")

    found, outcome = run_one(_rule(broken), RuleContext(_rl_run()))
    assert found == [] and outcome.status == "error" and "ZeroDivisionError: boom" in outcome.reason


def test_not_applicable_carries_its_reason():
    def absent(ctx):
        raise NotApplicable("no trace_events.jsonl: enable_trace was off")

    _, outcome = run_one(_rule(absent), RuleContext(_rl_run()))
    assert (outcome.status, outcome.reason) == ("not_applicable", "no trace_events.jsonl: enable_trace was off")


def test_select_and_ignore_by_slug_or_code():
    _, outcomes, _ = run_rules(_rl_run(), select=["TD201", "kl-drift"])
    assert [o.rule for o in outcomes] == ["renderer-kl-step0", "kl-drift"]
    _, outcomes, _ = run_rules(_rl_run(), ignore=["renderer-kl-step0"])
    assert "renderer-kl-step0" not in {o.rule for o in outcomes}
    with pytest.raises(KeyError):
        run_rules(_rl_run(), select=["no-such-rule"])


def test_config_override_changes_a_threshold(tmp_path):
    (tmp_path / "trace-doctor.toml").write_text("[rules.renderer-kl-step0]\nmax_kl_v2 = 0.1\n")
    settings = load_settings(str(tmp_path / "trace-doctor.toml"))
    found, _, _ = run_rules(_rl_run(), select=["renderer-kl-step0"], policy=settings.policy)
    assert found == []
    found, _, _ = run_rules(_rl_run(), select=["renderer-kl-step0"])
    assert [f.rule for f in found] == ["renderer-kl-step0"]
    (tmp_path / "bad.toml").write_text("[rules.kl-drift]\nmax_kll = 1\n")
    with pytest.raises(PolicyError):
        load_settings(str(tmp_path / "bad.toml"))


def test_every_rule_ends_in_one_status_and_output_is_deterministic():
    run = _rl_run()
    first, outcomes, _ = run_rules(run)
    second, _, _ = run_rules(run)
    assert [f.to_dict() for f in first] == [f.to_dict() for f in second]
    assert {o.status for o in outcomes} <= {"fired", "passed", "not_applicable", "error"}
    assert first == sorted(first, key=Finding.sort_key)
    assert {o.rule for o in outcomes} == {r.slug for r in REGISTRY.values() if not r.baseline_only}


def test_rules_share_each_span_subset_read_once_per_analysis(monkeypatch):
    """Several rules ask for the same spans: the context reads each query's rows from the stored table once
    (the same rows as run.spans_where), keyed by the whole expression and the columns."""
    run = load_run(fixture_run("sl_steady_slow"))
    ctx = RuleContext(run)
    reads = []
    read = run.spans_where
    monkeypatch.setattr(run, "spans_where", lambda where, columns=None: reads.append(columns) or read(where, columns))
    submits = pl.col("name").is_in(list(TRAINING_SUBMIT_CALLS))
    first = ctx.spans_where(submits, ["name", "dur_us"])
    # Built again (as another rule builds it): the same query, answered from the first read.
    again = ctx.spans_where(pl.col("name").is_in(list(TRAINING_SUBMIT_CALLS)), ["name", "dur_us"])
    assert again is first and len(reads) == 1
    assert first.height > 0 and first.equals(read(submits, ["name", "dur_us"]))
    # Other columns, or a list differing in a middle name only (its repr, shortened with "…", is the same), read anew.
    ctx.spans_where(submits, ["name"])
    other = pl.col("name").is_in([name for name in TRAINING_SUBMIT_CALLS if name != "optim_step"])
    assert str(other) == str(submits)
    assert not ctx.spans_where(other, ["name", "dur_us"]).equals(first)
    assert len(reads) == 3
