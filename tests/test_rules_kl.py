"""renderer-kl-step0 and kl-drift on synthetic RL metrics."""

from __future__ import annotations

from rule_helpers import by_rule, findings, run_from_rows


def _rl(kl):
    return [
        {
            "step": i,
            "progress/batch": i,
            "env/all/reward/total": 0.5,
            "optim/kl_sample_train_v1": v,
            "optim/kl_sample_train_v2": v,
        }
        for i, v in enumerate(kl)
    ]


def test_high_step0_kl_names_renderer_and_model():
    found, _, _ = findings(
        run_from_rows(_rl([0.06] + [0.05] * 9), renderer_name="qwen3", model_name="Qwen/Qwen3-8B", temperature=1.0)
    )
    rules = by_rule(found)
    assert "qwen3" in rules["renderer-kl-step0"][0].message and "Qwen/Qwen3-8B" in rules["renderer-kl-step0"][0].message
    assert "kl-drift" not in rules  # high from step 0 and flat: the step-0 finding covers it


def test_temperature_is_blamed_instead_of_renderer():
    found, _, _ = findings(run_from_rows(_rl([0.06] + [0.05] * 9), temperature=0.7), ["renderer-kl-step0"])
    assert found[0].severity == "info" and "temperature" in found[0].message


def test_drift_fires_on_sustained_kl_and_not_on_healthy():
    found, _, _ = findings(run_from_rows(_rl([1e-4] * 5 + [0.04] * 15)), ["kl-drift", "renderer-kl-step0"])
    assert [f.rule for f in found] == ["kl-drift"]
    healthy, outcomes, _ = findings(run_from_rows(_rl([1e-5] * 20)), ["kl-drift", "renderer-kl-step0"])
    assert healthy == [] and outcomes["kl-drift"].status == "passed"


def test_teacher_kl_at_step0_for_distillation_and_abstains_without_kl():
    found, _, _ = findings(
        run_from_rows([{"step": i, "progress/batch": i, "teacher_kl": 0.3} for i in range(5)]), ["renderer-kl-step0"]
    )
    assert found[0].fingerprint == "renderer-kl-step0:teacher"
    _, outcomes, _ = findings(
        run_from_rows([{"step": i, "train_mean_nll": 1.0} for i in range(5)]), ["renderer-kl-step0", "kl-drift"]
    )
    assert {o.status for o in outcomes.values()} == {"not_applicable"}
