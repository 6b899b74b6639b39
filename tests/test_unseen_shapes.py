"""Rules on run shapes the fixtures do not cover: DPO, distillation, async/stream RL, SFT eras, recipes, edge cases.

Each run is written into tmp_path in the exact formats of FORMATS.md with realistic magnitudes
(seconds to minutes per step), loaded with `load_run` and analysed end to end; the assertions are
what a Tinker expert would conclude from the same files.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from trace_doctor.api import analyze, load_run
from trace_doctor.model import Analysis
from trace_doctor.report.json_doc import build_document

TIMING_RULES = (
    "pipelining-gap",
    "get-batch-bottleneck",
    "warmup-slowness",
    "steady-slowness",
    "inconsistent-step-times",
)


# ---------------------------------------------------------------------------------------------
# Writing runs


def write_run(
    directory: Path,
    rows: list[dict[str, Any]] | None = None,
    config: dict[str, Any] | None = None,
    trace: list[dict[str, Any]] | None = None,
) -> Path:
    """A cookbook log dir: metrics.jsonl as json.dumps writes it (bare NaN), config.json with indent=2."""
    directory.mkdir(parents=True, exist_ok=True)
    if rows is not None:
        (directory / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if config is not None:
        (directory / "config.json").write_text(json.dumps(config, indent=2))
    if trace is not None:
        (directory / "trace_events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in trace))
    return directory


def noisy(rng: random.Random, value: float, rel: float = 0.05) -> float:
    return max(value * (1.0 + rng.gauss(0.0, rel)), value * 0.2)


def run_analysis(directory: Path) -> tuple[Analysis, dict[str, Any]]:
    result = analyze(load_run(directory))
    return result, build_document(result)


def fired(result: Analysis) -> dict[str, list]:
    out: dict[str, list] = {}
    for f in result.findings:
        out.setdefault(f.rule, []).append(f)
    return out


def status(result: Analysis) -> dict[str, Any]:
    return {o.rule: o for o in result.outcomes}


def _non_finite(value: Any, where: str = "") -> list[str]:
    if isinstance(value, float):
        return [] if math.isfinite(value) else [where]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _non_finite(v, f"{where}.{k}")]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in _non_finite(v, f"{where}[{i}]")]
    return []


def assert_sane(result: Analysis, doc: dict[str, Any]) -> None:
    """No rule errors, no NaN/inf, impacts inside the run's wall time, no contradictory timing findings."""
    errors = [(o.rule, o.reason) for o in result.outcomes if o.status == "error"]
    assert errors == []
    raw = [f.to_dict() for f in result.findings]
    assert _non_finite(raw, "findings") == []
    assert _non_finite(result.summary, "summary") == []
    json.dumps(doc, allow_nan=False)
    for f in raw:
        text = f["title"] + " " + f["message"]
        # Python's spelling of a float that leaked into prose ("nan", "inf"); a message may say "NaN" on purpose.
        assert " nan" not in text and " inf " not in text, text
    wall = doc["summary"]["wall_time_s"]
    for f in raw:
        lost, share = f["impact"]["seconds_lost"], f["impact"]["fraction_of_wall"]
        if lost is not None:
            assert lost >= 0, f
            if wall:
                assert lost <= wall * 1.0001, (f["rule"], lost, wall)
        if share is not None:
            assert 0.0 <= share <= 1.0, f
    for o in result.outcomes:
        assert o.reason, f"{o.rule} ended {o.status} without saying why"
    rules = fired(result)
    if "warmup-slowness" in rules:
        warm_steps = {s for f in rules["warmup-slowness"] for s in f.steps}
        for f in rules.get("inconsistent-step-times", []):
            assert not warm_steps & set(f.steps), "warm-up steps reported as unexplained spikes too"


def warnings_fired(result: Analysis) -> set[str]:
    return {f.rule for f in result.findings if f.severity in ("warning", "error")}


# ---------------------------------------------------------------------------------------------
# 1. DPO (preference/train_dpo.py)

DPO_CONFIG = {
    "log_path": "/home/user/runs/dpo",
    "model_name": "meta-llama/Llama-3.2-1B",
    "renderer_name": "llama3",
    "dataset_builder": {"common_config": {"batch_size": 256, "max_length": 8192, "renderer_name": "llama3"}},
    "learning_rate": 1e-05,
    "lr_schedule": "linear",
    "num_epochs": 1,
    "dpo_beta": 0.1,
    "lora_rank": 32,
    "num_replicas": 1,
    "reference_model_name": None,
    "evaluator_builders": [],
    "infrequent_evaluator_builders": [],
    "save_every": 20,
    "eval_every": 10,
    "infrequent_eval_every": 0,
    "enable_trace": False,
    "wandb_project": None,
}


def dpo_rows(n: int = 50, get_batch_share: float | None = None, seed: int = 1) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for step in range(n):
        ref = noisy(rng, 2.1)
        train = noisy(rng, 5.3)
        evals = noisy(rng, 6.1) if step % 10 == 0 else None
        save = noisy(rng, 3.0) if step and step % 20 == 0 else None
        rest = ref + train + (evals or 0) + (save or 0) + 0.05
        # get_batch share of the whole step: g = s·(rest + g) ⇒ g = s·rest/(1 − s)
        get_batch = (
            noisy(rng, get_batch_share * rest / (1 - get_batch_share), 0.03) if get_batch_share else noisy(rng, 0.44)
        )
        total = rest + get_batch
        loss = 0.693 - 0.2 * step / n + rng.gauss(0, 0.005)
        row: dict[str, Any] = {
            "step": step,
            "epoch": 0,
            "num_pairs": 254,
            "num_tokens": 106677 + rng.randint(-5000, 5000),
            "learning_rate": 1e-05 * (1 - step / n),
            "progress": step / n,
            "dpo_loss": loss,
            "accuracy": 0.5 + 0.3 * step / n,
            "margin": 0.006 + 0.5 * step / n,
            "chosen_reward": 0.01,
            "rejected_reward": -0.01,
            "loss:sum": -0.57,
            "clock_cycle:unique": 738784 + step,
        }
        if evals is not None:
            row["test/nll"] = 1.80 - 0.1 * step / n
            row["time/run_evaluator"] = evals - 0.002
            row["time/evals"] = evals
        row["time/get_batch"] = get_batch
        row["time/get_ref_logprobs"] = ref
        row["time/step"] = train
        if save is not None:
            row["state_path"] = f"tinker://3f1c-run/weights/{step:06d}"
            row["time/save_checkpoint"] = save
        row["time/total"] = total
        row["batch_time"] = total
        rows.append(row)
    return rows


def test_dpo_healthy_is_quiet(tmp_path):
    result, doc = run_analysis(write_run(tmp_path, dpo_rows(), DPO_CONFIG))
    assert_sane(result, doc)
    assert result.run.meta.trainer == "dpo"
    assert warnings_fired(result) == set()
    # Evaluations every 10 steps are scheduled work, never instability.
    assert not [f for f in fired(result).get("inconsistent-step-times", []) if f.severity != "info"]


def test_dpo_slow_get_batch_is_the_bottleneck(tmp_path):
    result, doc = run_analysis(write_run(tmp_path, dpo_rows(get_batch_share=0.4), DPO_CONFIG))
    assert_sane(result, doc)
    rules = fired(result)
    assert "get-batch-bottleneck" in rules
    share = rules["get-batch-bottleneck"][0].evidence["share"]
    assert 0.33 <= share <= 0.45
    assert "warmup-slowness" not in rules and "pipelining-gap" not in rules


def test_dpo_slow_reference_scoring_is_not_excess_clock_cycles(tmp_path):
    rows = dpo_rows()
    for row in rows:  # a large reference model: scoring takes 6x longer, every step alike
        extra = 5 * row["time/get_ref_logprobs"]
        row["time/get_ref_logprobs"] += extra
        row["time/total"] += extra
        row["batch_time"] = row["time/total"]
    result, doc = run_analysis(write_run(tmp_path, rows, DPO_CONFIG))
    assert_sane(result, doc)
    # Every result wait is ~5.3 s, so the "cycle" fitted to them is only an upper bound.
    assert result.outcomes and "steady-slowness" not in fired(result)
    assert warnings_fired(result) == set()


# ---------------------------------------------------------------------------------------------
# 2. On-policy distillation

DISTILL_CONFIG = {
    "log_path": "/home/user/runs/distill",
    "model_name": "Qwen/Qwen3-8B-Base",
    "renderer_name": "qwen3",
    "dataset_configs": [
        {"dataset_builder": {"batch_size": 64, "group_size": 4}, "teacher_config": {"base_model": "Qwen/Qwen3-32B"}}
    ],
    "learning_rate": 1e-4,
    "max_tokens": 4096,
    "kl_penalty_coef": 1.0,
    "kl_discount_factor": 0.0,
    "lora_rank": 128,
    "eval_every": 10,
    "save_every": 20,
    "enable_trace": False,
    "loss_fn": "importance_sampling",
}


def distill_rows(teacher_kl0: float, n: int = 40, seed: int = 2) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for step in range(n):
        tkl = max(
            0.004,
            teacher_kl0 * (0.6 + 0.4 * math.exp(-step / 6))
            if teacher_kl0 > 0.1
            else teacher_kl0 * math.exp(-step / 15),
        ) + abs(rng.gauss(0, 0.001))
        sample = noisy(rng, 48.0)
        train = noisy(rng, 11.0)
        evals = noisy(rng, 30.0) if step % 10 == 0 else None
        kl_pen = noisy(rng, 4.0)
        total = sample + train + kl_pen + (evals or 0) + noisy(rng, 1.5)
        row = {
            "step": step,
            "progress/batch": step,
            "optim/lr": 1e-4,
            "progress/done_frac": (step + 1) / n,
            "env/all/ac_tokens_per_turn": 900 + rng.gauss(0, 30),
            "env/all/total_episodes": 256,
            "env/all/reward/total": -tkl,
            "optim/kl_sample_train_v1": rng.gauss(0.0005, 0.0003),
            "optim/kl_sample_train_v2": abs(rng.gauss(0.0006, 0.0002)),
            "optim/entropy": 0.45,
            "teacher_kl": tkl,
            "teacher_kl/dataset_0": tkl,
        }
        if evals is not None:
            row["test/env/all/reward/total"] = -tkl
            row["time/run_evals"] = evals
        row.update({"time/sample": sample, "time/compute_kl_penalty": kl_pen, "time/train": train, "time/total": total})
        rows.append(row)
    return rows


def test_distillation_healthy_teacher_kl(tmp_path):
    result, doc = run_analysis(write_run(tmp_path, distill_rows(0.02), DISTILL_CONFIG))
    assert_sane(result, doc)
    assert result.run.meta.trainer == "distillation"
    assert warnings_fired(result) == set()
    assert status(result)["renderer-kl-step0"].status == "passed"


def test_distillation_teacher_renderer_mismatch_at_step0(tmp_path):
    result, doc = run_analysis(write_run(tmp_path, distill_rows(0.3), DISTILL_CONFIG))
    assert_sane(result, doc)
    kl = fired(result).get("renderer-kl-step0", [])
    assert [f.fingerprint for f in kl] == ["renderer-kl-step0:teacher"]
    assert kl[0].steps == [0] and kl[0].evidence["value"] == pytest.approx(0.3, abs=0.01)
    # sampler-vs-trainer KL is healthy: the student's own sampler is fine, drift must not fire.
    assert "kl-drift" not in fired(result)


def test_distillation_gap_closed_by_training_is_not_a_renderer_mismatch(tmp_path):
    rows = distill_rows(0.02)
    for row in rows:  # a 4B student far from its teacher at first, matched within 15 steps
        row["teacher_kl"] = row["teacher_kl/dataset_0"] = 2.0 * math.exp(-row["step"] / 3) + 0.02
    result, doc = run_analysis(write_run(tmp_path, rows, DISTILL_CONFIG))
    assert_sane(result, doc)
    outcome = status(result)["renderer-kl-step0"]
    assert outcome.status == "passed" and "closed by training" in outcome.reason


# ---------------------------------------------------------------------------------------------
# 3. Off-policy distillation: no timing at all


def test_off_policy_distillation_has_no_timing_and_nothing_fires(tmp_path):
    rng = random.Random(3)
    rows = []
    for i in range(30):
        # {"step": i, **metrics} where metrics repeats "step": one key in the file.
        row = {
            "step": i,
            "progress/done_frac": (i + 1) / 30,
            "optim/lr": 2e-4,
            "batch_size": 128,
            "train/loss:sum": 5200.0 * (1 - i / 60) + rng.gauss(0, 20),
            "train/clock_cycle:unique": 9000 + i,
        }
        if i % 10 == 0:
            row["test/nll"] = 1.1 - 0.01 * i
        rows.append(row)
    config = {
        "log_path": "/runs/offp",
        "model_name": "Qwen/Qwen3-4B",
        "renderer_name": "qwen3",
        "n_teacher_targets": 4,
        "teacher_concurrency": 64,
        "batch_size": 128,
        "learning_rate": 2e-4,
    }
    result, doc = run_analysis(write_run(tmp_path, rows, config))
    assert_sane(result, doc)
    assert result.findings == []
    outcomes = status(result)
    for slug in TIMING_RULES:
        assert outcomes[slug].status == "not_applicable", (slug, outcomes[slug].status, outcomes[slug].reason)
        assert "time" in outcomes[slug].reason or "trace" in outcomes[slug].reason
    assert outcomes["renderer-kl-step0"].status == "not_applicable"


# ---------------------------------------------------------------------------------------------
# 4. 0.6.1 async RL

ASYNC_CONFIG = {
    "log_path": "/runs/async",
    "model_name": "Qwen/Qwen3-8B",
    "renderer_name": "qwen3",
    "learning_rate": 4e-5,
    "dataset_builder": {"batch_size": 64, "group_size": 8},
    "max_tokens": 2048,
    "temperature": 1.0,
    "kl_penalty_coef": 0.0,
    "loss_fn": "importance_sampling",
    "num_substeps": 1,
    "eval_every": 10,
    "save_every": 20,
    "async_config": {"max_steps_off_policy": 4, "groups_per_batch": 64},
    "stream_minibatch_config": None,
    "enable_trace": False,
    "session_name": None,
    "num_epochs": 1,
}


def async_rows(n: int = 60, late_drift: bool = False, seed: int = 4) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    cum_cost = 0.0
    elapsed = 0.0
    pending_evals: list[dict[str, Any]] = []
    for step in range(n):
        late = late_drift and step >= int(0.6 * n)
        staleness = (3.5 if late else 1.0) + rng.gauss(0, 0.2)
        kl = (0.03 if late else 0.0015) * (1 + rng.gauss(0, 0.1))
        fb = noisy(rng, 0.004)
        train_step = noisy(rng, 9.5)
        save = noisy(rng, 2.2)
        do_train = train_step + save + noisy(rng, 0.8)
        total = do_train + 0.05
        cost = 0.12 + rng.gauss(0, 0.005)
        cum_cost += cost
        elapsed += noisy(rng, 38.0)
        row = {
            "step": step,
            "training_client/step": step,
            "optim/lr": 4e-5,
            "progress/done_frac": (step + 1) / n,
            "sampling_client/step_min": max(0, step - 3),
            "sampling_client/step_max": step,
            "sampling_client/step_mean": max(0.0, step - staleness),
            "async/staleness_mean": max(0.0, staleness),
            "async/staleness_max": max(0.0, staleness) + 1,
            "env/all/reward/total": 0.3 + 0.4 * step / n,
            "env/all/by_group/frac_mixed": 0.7,
            "optim/kl_sample_train_v1": kl * 0.9,
            "optim/kl_sample_train_v2": kl,
            "optim/entropy": 0.5,
            "tokens/sampled": 950000,
            "tokens/prefill_cached": 300000,
            "tokens/prefill_uncached": 120000,
            "tokens/trained": 1070000,
            "tokens/cumulative/sampled": 950000 * (step + 1),
            "cost/step_usd": cost,
            "cost/cumulative_usd": cum_cost,
            "time/forward_backward": fb,
            "time/optim_step": noisy(rng, 0.002),
            "time/train_step": train_step,
            "time/save_checkpoint": save,
            "time/do_train_step_and_get_sampling_client": do_train,
            "time/sampling_time_mean": noisy(rng, 31.0),
            "time/sampling_time_max": noisy(rng, 44.0),
            "time/total": total,
        }
        rows.append(row)
        if step % 10 == 0:
            pending_evals.append(
                {
                    "step": step,
                    "eval/snapshot/training_step": step,
                    "eval/snapshot/elapsed_seconds": elapsed,
                    "eval/snapshot/cumulative_cost_usd": cum_cost,
                    "eval/completed_elapsed_seconds": elapsed + 70,
                    "test/env/all/reward/total": 0.3 + 0.4 * step / n,
                    "eval/by_step/test/env/all/reward/total": 0.3 + 0.4 * step / n,
                    "eval/timing/time/run_single_evaluation": noisy(rng, 65.0),
                    "eval/timing/time/total": noisy(rng, 70.0),
                }
            )
        # Evals finish two training steps later and are logged out of order.
        while pending_evals and pending_evals[0]["step"] <= step - 2:
            rows.append(pending_evals.pop(0))
    rows += pending_evals
    return rows


def test_async_rl_healthy_is_quiet(tmp_path):
    result, doc = run_analysis(write_run(tmp_path, async_rows(), ASYNC_CONFIG))
    assert_sane(result, doc)
    assert (result.run.meta.trainer, result.run.meta.trainer_mode) == ("rl", "async")
    assert warnings_fired(result) == set()
    # The eval rows reuse training step numbers: they must not become a resumed segment.
    assert result.summary["warmup_steps"] == 0


def test_async_rl_late_kl_rise_within_the_staleness_bound_is_not_drift(tmp_path):
    # KL 0.03 on samples 3 updates old (max_steps_off_policy 4): 0.01 per update for v1, 0.0033 for v2 —
    # the policy's own movement over the lag, which the on-policy band cannot call drift.
    result, doc = run_analysis(write_run(tmp_path, async_rows(late_drift=True), ASYNC_CONFIG))
    assert_sane(result, doc)
    rules = fired(result)
    assert "renderer-kl-step0" not in rules and "kl-drift" not in rules
    outcome = next(o for o in result.outcomes if o.rule == "kl-drift")
    assert outcome.status == "passed" and "per policy update" in outcome.reason


# ---------------------------------------------------------------------------------------------
# 5. Stream RL

STREAM_CONFIG = {
    **ASYNC_CONFIG,
    "log_path": "/runs/stream",
    "async_config": None,
    "stream_minibatch_config": {"groups_per_batch": 64, "num_minibatches": 4},
}


def stream_rows(n: int = 40, spikes: tuple[int, ...] = (), seed: int = 5) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    rows = []
    for step in range(n):
        row: dict[str, Any] = {
            "step": step,
            "progress/batch": step,
            "optim/lr": 4e-5,
            "progress/done_frac": (step + 1) / n,
            "env/all/reward/total": 0.4,
            "optim/kl_sample_train_v1": 0.001,
            "optim/kl_sample_train_v2": abs(rng.gauss(0.0015, 0.0003)),
        }
        minibatch_total = 0.0
        for m in range(4):
            enq, con = noisy(rng, 0.01), noisy(rng, 4.5)
            row[f"time/train/fwd_bwd_substep_0_mb_{m}_enqueue"] = enq
            row[f"time/train/fwd_bwd_substep_0_mb_{m}_consume"] = con
            minibatch_total += enq + con
        row["time/train/optim_substep_0_enqueue"] = noisy(rng, 0.01)
        row["time/train/optim_substep_0_consume"] = noisy(rng, 1.2)
        row["time/trajectory_group_worker_task:total"] = noisy(rng, 64 * 35.0)
        row["time/trajectory_group_worker_task:count"] = 64
        row["time/trajectory_group_worker_task:mean"] = noisy(rng, 35.0)
        row["time/trajectory_group_worker_task:max"] = noisy(rng, 52.0)
        do_train = minibatch_total + noisy(rng, 3.0)
        row["time/do_train_step_streaming_and_get_sampling_client"] = do_train
        evals = noisy(rng, 40.0) if step % 10 == 0 or step == n - 1 else 0.0
        if evals:
            row["time/run_evals"] = evals
        untimed = noisy(rng, 20.0) + (4 * 60.0 if step in spikes else 0.0)
        row["time/total"] = do_train + evals + untimed
        rows.append(row)
    return rows


def test_stream_rl_healthy_is_quiet(tmp_path):
    result, doc = run_analysis(write_run(tmp_path, stream_rows(), STREAM_CONFIG))
    assert_sane(result, doc)
    assert result.run.meta.trainer_mode == "stream"
    assert warnings_fired(result) == set()


def test_stream_rl_untimed_stalls_are_inconsistent_step_times(tmp_path):
    result, doc = run_analysis(write_run(tmp_path, stream_rows(spikes=(13, 22, 27, 34)), STREAM_CONFIG))
    assert_sane(result, doc)
    spikes = [
        f
        for f in fired(result).get("inconsistent-step-times", [])
        if f.fingerprint == "inconsistent-step-times:unexplained"
    ]
    assert spikes and set(spikes[0].steps) == {13, 22, 27, 34}
    assert "warmup-slowness" not in fired(result)


# ---------------------------------------------------------------------------------------------
# 6. SFT eras

SFT_CONFIG = {
    "log_path": "/runs/sft",
    "model_name": "Qwen/Qwen3-8B",
    "recipe_name": "chat_sl",
    "load_checkpoint_path": None,
    "renderer_name": "qwen3",
    "dataset_builder": {
        "common_config": {
            "model_name_for_tokenizer": "Qwen/Qwen3-8B",
            "renderer_name": "qwen3",
            "max_length": 16384,
            "batch_size": 128,
        }
    },
    "learning_rate": 2e-4,
    "lr_schedule": "linear",
    "num_epochs": 1,
    "lora_rank": 32,
    "evaluator_builders": [],
    "infrequent_evaluator_builders": [],
    "save_every": 20,
    "eval_every": 0,
    "infrequent_eval_every": 0,
    "enable_trace": False,
    "span_chart_every": 0,
    "max_steps": None,
    "submit_ahead": 1,
    "session_name": None,
}


def sft_061_rows(
    n: int = 60, sequential: bool = False, slow_from: int | None = None, seed: int = 6
) -> list[dict[str, Any]]:
    """0.6.1 SFT: no time/total. Pipelined, finish_batch waits only for what is left of the step."""
    rng = random.Random(seed)
    rows = []
    for step in range(n):
        get_batch = noisy(rng, 0.38) + (14.0 if step == 0 else 0.0)
        submit = get_batch + noisy(rng, 0.03)
        service = noisy(rng, 5.6) * (3.0 if slow_from is not None and step >= slow_from else 1.0)
        # Pipelined: the next submission overlapped this wait, so only the rest of it is waited.
        wait = service if sequential else max(service - submit, 0.05)
        finish = wait + noisy(rng, 0.01)
        row = {
            "step": step,
            "epoch": 0,
            "progress": (step + 1) / n,
            "learning_rate": 2e-4 * (1 - step / n),
            "num_sequences": 128,
            "num_tokens": 301245 + rng.randint(-9000, 9000),
            "num_loss_tokens": 121873.0,
            "train_mean_nll": 0.73 - 0.1 * step / n + rng.gauss(0, 0.01),
            "train_mean_bpb": 0.6,
            "tokens/trained": 301245,
            "tokens/cumulative/trained": 301245 * (step + 1),
            "time/get_batch": get_batch,
            "time/forward_backward": noisy(rng, 0.003),
            "time/optim_step": noisy(rng, 0.001),
            "time/submit_batch": submit,
            "time/step": wait,
            "time/finish_batch": finish,
        }
        if step and step % 20 == 0:
            row["time/save_checkpoint"] = noisy(rng, 4.0)
            row["time/finish_batch"] += row["time/save_checkpoint"]
        rows.append(row)
    return rows


def test_sft_061_submit_ahead_0_is_a_pipelining_gap(tmp_path):
    result, doc = run_analysis(write_run(tmp_path, sft_061_rows(sequential=True), {**SFT_CONFIG, "submit_ahead": 0}))
    assert_sane(result, doc)
    gap = fired(result)["pipelining-gap"][0]
    assert gap.fingerprint == "pipelining-gap:submit-ahead-0"
    # Pipelined, each step's ~0.4 s of submission would overlap the ~5.6 s wait.
    assert 0.04 <= gap.fraction_of_wall <= 0.1
    assert "warmup-slowness" in fired(result)  # the 14 s first get_batch (dataset load)
    assert "get-batch-bottleneck" not in fired(result)


def test_sft_061_submit_ahead_1_is_quiet(tmp_path):
    result, doc = run_analysis(write_run(tmp_path, sft_061_rows(), SFT_CONFIG))
    assert_sane(result, doc)
    assert warnings_fired(result) == set()
    assert status(result)["pipelining-gap"].status == "not_applicable"
    warm = fired(result)["warmup-slowness"][0]
    assert warm.steps == [0] and warm.evidence["dominant_phase"] in ("get_batch", "submit_batch")


def legacy_sft_rows(n: int = 60, seed: int = 7) -> list[dict[str, Any]]:
    """≤2026-03-17 pipelined SFT: time/total spans step k's submission to its finish, over step k-1's finish."""
    rng = random.Random(seed)
    rows = []
    for step in range(n):
        get_batch = noisy(rng, 0.4)
        wait = noisy(rng, 5.3)
        prev_wait = noisy(rng, 5.3) if step else 0.0
        evals = noisy(rng, 25.0) if step % 20 == 0 else None
        save = noisy(rng, 4.0) if step and step % 25 == 0 else None
        total = get_batch + (evals or 0) + prev_wait + wait + (save or 0) + 0.02
        row = {
            "step": step,
            "epoch": 0,
            "progress": (step + 1) / n,
            "learning_rate": 2e-4,
            "num_sequences": 128,
            "num_tokens": 300000,
            "num_loss_tokens": 120000.0,
            "train_mean_nll": 0.7 - 0.1 * step / n,
            "time/get_batch": get_batch,
        }
        if evals is not None:
            row["test/nll"] = 0.8
            row["time/evals"] = evals
        row["time/step"] = wait
        if save is not None:
            row["time/save_checkpoint"] = save
        row["time/total"] = total
        rows.append(row)
    return rows


def test_legacy_pipelined_sft_overlapping_totals(tmp_path):
    config = {k: v for k, v in SFT_CONFIG.items() if k not in ("submit_ahead", "session_name", "renderer_name")}
    result, doc = run_analysis(write_run(tmp_path, legacy_sft_rows(), config))
    assert_sane(result, doc)
    assert warnings_fired(result) == set()
    # Step 0 has no previous finish to overlap: it looks like half a step, not a warm-up.
    assert "warmup-slowness" not in fired(result)


# ---------------------------------------------------------------------------------------------
# 7. Minimal recipes


def test_recipe_sl_loop_time_total_underscore(tmp_path):
    rng = random.Random(8)
    rows = [
        {
            "step": i,
            "num_sequences": 128,
            "num_tokens": 290000,
            "learning_rate": 1e-4,
            "train_mean_nll": 0.9 - 0.002 * i,
            "train_mean_bpb": 0.7,
            "progress": (i + 1) / 40,
            "time_total": noisy(rng, 6.2) + (20.0 if i == 0 else 0.0),
        }
        for i in range(40)
    ]
    config = {
        "log_path": "/runs/sl_loop",
        "model_name": "meta-llama/Llama-3.1-8B",
        "batch_size": 128,
        "learning_rate": 1e-4,
        "max_length": 32768,
        "train_on_what": "all_assistant_messages",
        "lora_rank": 32,
        "save_every": 20,
    }
    result, doc = run_analysis(write_run(tmp_path, rows, config))
    assert_sane(result, doc)
    assert result.summary["steady_step_time_s"] == pytest.approx(6.2, rel=0.1)
    assert warnings_fired(result) == set()
    assert [f.steps for f in fired(result)["warmup-slowness"]] == [[0]]


def test_recipe_rl_loop_reward_total(tmp_path):
    rng = random.Random(9)
    rows = [
        {
            "step": i,
            "progress/batch": i,
            "optim/lr": 4e-5,
            "progress/done_frac": (i + 1) / 30,
            "reward/total": 0.2 + 0.01 * i,
            "time/total": noisy(rng, 75.0),
        }
        for i in range(30)
    ]
    config = {
        "log_path": "/runs/rl_loop",
        "model_name": "meta-llama/Llama-3.1-8B",
        "batch_size": 128,
        "group_size": 16,
        "learning_rate": 4e-5,
        "lora_rank": 32,
        "max_tokens": 256,
        "save_every": 20,
    }
    result, doc = run_analysis(write_run(tmp_path, rows, config))
    assert_sane(result, doc)
    assert result.run.meta.trainer == "rl"
    assert result.findings == []
    assert status(result)["get-batch-bottleneck"].status == "not_applicable"


# ---------------------------------------------------------------------------------------------
# 8. Temperature confound at step 0


def test_temperature_explains_step0_kl(tmp_path):
    rng = random.Random(10)
    rows = []
    for i in range(30):
        kl = 0.05 * (1 + rng.gauss(0, 0.05))
        rows.append(
            {
                "step": i,
                "progress/batch": i,
                "optim/lr": 4e-5,
                "progress/done_frac": (i + 1) / 30,
                "env/all/reward/total": 0.5,
                "optim/kl_sample_train_v1": kl,
                "optim/kl_sample_train_v2": kl * 1.1,
                "optim/entropy": 0.4,
                "time/sampling": noisy(rng, 50.0),
                "time/train_step": noisy(rng, 12.0),
                "time/total": noisy(rng, 70.0),
            }
        )
    config = {**ASYNC_CONFIG, "async_config": None, "temperature": 0.7}
    result, doc = run_analysis(write_run(tmp_path, rows, config))
    assert_sane(result, doc)
    kl0 = fired(result)["renderer-kl-step0"][0]
    assert kl0.fingerprint == "renderer-kl-step0:temperature" and kl0.severity == "info"
    assert "temperature" in kl0.message and "0.7" in kl0.message
    assert "kl-drift" not in fired(result)


# ---------------------------------------------------------------------------------------------
# 9. Mid-run regime change


def test_mid_run_regime_change_is_one_clear_statement(tmp_path):
    result, doc = run_analysis(write_run(tmp_path, sft_061_rows(n=2000, slow_from=1000, seed=11), SFT_CONFIG))
    assert_sane(result, doc)
    rules = fired(result)
    regime = [
        f for f in rules.get("inconsistent-step-times", []) if f.fingerprint == "inconsistent-step-times:regime-change"
    ]
    assert len(regime) == 1, [f.fingerprint for f in result.findings]
    change = regime[0]
    assert change.evidence["change_step"] == pytest.approx(1000, abs=2)
    assert change.evidence["ratio"] == pytest.approx(3.0, abs=0.3)
    assert change.evidence["dominant_phase"] in ("step", "finish_batch")
    # ~1000 steps × (≈16.8 − ≈5.6) s, about half the run's wall time.
    assert 10000 < change.seconds_lost < 12500
    assert 0.4 < change.fraction_of_wall < 0.6
    # Not a warm-up (the slow part comes last) and not a whole-run steady slowness.
    # Step 0 (14 s dataset load) is a warm-up against the fast level that follows it.
    assert [f.steps for f in rules["warmup-slowness"]] == [[0]]
    assert "steady-slowness" not in rules
    assert not [
        f for f in rules.get("inconsistent-step-times", []) if f.fingerprint == "inconsistent-step-times:unexplained"
    ]


def test_long_steady_run_has_no_regimes(tmp_path):
    result, doc = run_analysis(write_run(tmp_path, sft_061_rows(n=2000, seed=13), SFT_CONFIG))
    assert_sane(result, doc)
    assert "inconsistent-step-times" not in fired(result)
    assert warnings_fired(result) == set()


def test_real_rl_run_that_speeds_up_mid_run():
    from conftest import corpus_path

    path = corpus_path("tinker-cookbook/tinker_cookbook/recipes/cog_rl/results/experiment_6/training_metrics.jsonl")
    result, doc = run_analysis(path)
    assert_sane(result, doc)
    regime = [f for f in result.findings if f.fingerprint == "inconsistent-step-times:regime-change"]
    assert len(regime) == 1 and regime[0].severity == "info"
    assert regime[0].evidence["change_step"] == 42 and regime[0].evidence["ratio"] == pytest.approx(0.53, abs=0.05)
    assert regime[0].evidence["dominant_phase"] == "unknown"  # only time/total is logged


# ---------------------------------------------------------------------------------------------
# 10. Degenerate runs


@pytest.mark.parametrize("n", [1, 2])
def test_one_or_two_steps(tmp_path, n):
    rows = dpo_rows(n=n)
    result, doc = run_analysis(write_run(tmp_path, rows, DPO_CONFIG))
    assert_sane(result, doc)
    assert result.findings == []
    outcomes = status(result)
    assert {outcomes[s].status for s in ("warmup-slowness", "steady-slowness", "inconsistent-step-times")} <= {
        "not_applicable",
        "passed",
    }


def test_all_nan_time_total(tmp_path):
    rows = [
        {
            "step": i,
            "progress/batch": i,
            "optim/lr": 4e-5,
            "env/all/reward/total": 0.3,
            "optim/kl_sample_train_v2": float("nan"),
            "time/total": float("nan"),
        }
        for i in range(20)
    ]
    result, doc = run_analysis(write_run(tmp_path, rows))
    assert_sane(result, doc)
    # A KL that is NaN on every step (while the reward is fine) is a metric never computed, said once.
    assert [f.fingerprint for f in result.findings] == ["training-instability:never-finite"]
    assert result.findings[0].severity == "warning"
    assert doc["summary"]["wall_time_s"] is None
    assert status(result)["inconsistent-step-times"].status == "not_applicable"


def test_metrics_with_only_eval_rows(tmp_path):
    rows = [{"step": i * 10, "test/nll": 0.9 - 0.01 * i, "test/bpb": 0.7} for i in range(8)]
    result, doc = run_analysis(write_run(tmp_path, rows))
    assert_sane(result, doc)
    assert result.findings == []
    assert all(o.status in ("not_applicable", "passed") for o in result.outcomes)


# ---------------------------------------------------------------------------------------------
# 11. Trace only, 0.6.1 writer


class TraceWriter:
    """Events as the 0.6.1 TraceCollector writes them (fake pid 0, hashed tids, private SDK tracks)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.named: set[int] = set()
        self.private = 0

    def _meta(self, tid: int, track: str) -> None:
        if tid not in self.named:
            self.named.add(tid)
            self.events.append(
                {"name": "thread_name", "ph": "M", "pid": 0, "tid": tid, "ts": 0, "args": {"name": track}}
            )

    def span(self, name: str, track: str, tid: int, start_s: float, end_s: float, **attrs: Any) -> None:
        base = {"track": track, "thread": "MainThread"}
        self.events.append(
            {"name": name, "ph": "B", "pid": 0, "tid": tid, "ts": start_s * 1e6, "args": base, "cat": "async"}
        )
        self._meta(tid, track)
        self.events.append(
            {
                "name": name,
                "ph": "E",
                "pid": 0,
                "tid": tid,
                "ts": end_s * 1e6,
                "args": {**base, **attrs},
                "cat": "async",
            }
        )

    def sdk_call(self, task: str, method: str, start_s: float, end_s: float) -> None:
        """A completion-timed SDK call on its own private track `<task>:<method>:<tid>`."""
        tid = 1_000_000 + self.private
        self.private += 1
        self.span(method, f"{task}:{method}:{tid}", tid, start_s, end_s)


def rl_trace(
    n: int = 12, sequential: bool = True, seed: int = 12, private_submits: bool = False
) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    w = TraceWriter()
    main_tid = 481227
    t = 473726.0  # perf_counter seconds since boot
    start = t
    w.events.append(
        {"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "ts": 0, "args": {"name": "MainThread Thread"}}
    )
    for step in range(n):
        sampling_start = t
        for g in range(8):
            s0 = t + 0.01 * g
            w.sdk_call(f"Task-{100 + step * 8 + g}", "sample", s0, s0 + noisy(rng, 30.0))
        t += 34.0
        w.span("sampling", "main", main_tid, sampling_start, t)
        do_start = t
        fb0 = t + 0.3
        fb1 = fb0 + noisy(rng, 0.004)
        wait = noisy(rng, 8.0) if sequential else 0.0008
        op0 = fb1 + wait
        op1 = op0 + noisy(rng, 0.002)
        if private_submits:
            w.sdk_call("main", "forward_backward", fb0, fb1)
            w.sdk_call("main", "optim_step", op0, op1)
        else:
            w.span("forward_backward", "main", main_tid, fb0, fb1)
            w.span("optim_step", "main", main_tid, op0, op1)
        t = op1 + noisy(rng, 4.0 if sequential else 11.0)
        w.span("train_step", "main", main_tid, fb0 - 0.01, t)
        w.sdk_call("main", "save_weights_and_get_sampling_client", t, t + noisy(rng, 2.5))
        t += 2.6
        w.span("do_train_step_and_get_sampling_client", "main", main_tid, do_start, t, step=step)
    w.span("main", "main", main_tid, start - 1.0, t + 0.5)
    return w.events


@pytest.mark.parametrize("private_submits", [False, True], ids=["submits-on-caller-track", "submits-on-private-tracks"])
def test_trace_only_sequential_fb_optim_is_a_pipelining_gap(tmp_path, private_submits):
    result, doc = run_analysis(write_run(tmp_path, trace=rl_trace(private_submits=private_submits)))
    assert_sane(result, doc)
    gap = fired(result)["pipelining-gap"]
    assert [f.fingerprint for f in gap] == ["pipelining-gap:sequential-fb-optim"]
    assert gap[0].evidence["sequential_steps"] == 12
    assert 0.15 < gap[0].fraction_of_wall < 0.25
    for slug in ("warmup-slowness", "steady-slowness", "get-batch-bottleneck"):
        assert status(result)[slug].status == "not_applicable"
    # With only a trace, stalls between steps are still judged (against the traced step interval).
    assert status(result)["inconsistent-step-times"].status == "passed"


def test_trace_only_back_to_back_fb_optim_passes(tmp_path):
    result, doc = run_analysis(write_run(tmp_path, trace=rl_trace(sequential=False)))
    assert_sane(result, doc)
    assert "pipelining-gap" not in fired(result)
    assert status(result)["pipelining-gap"].status == "passed"
