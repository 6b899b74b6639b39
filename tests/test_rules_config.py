"""renderer-model-mismatch (TD208), config-risk (TD209) and run-fitting version findings.

On the `fixtures/training/config_*` runs (fire and stay-silent twins, cookbook formats) and on every
real corpus run with a config.json, plus the renderer registry and the version-line parsing.
"""

from __future__ import annotations

import json
import shutil
from functools import cache
from pathlib import Path

import pytest
from conftest import CORPUS, CORPUS_MISSING, ROOT, corpus_path
from rule_helpers import findings as run_findings
from rule_helpers import run_from_rows

from trace_doctor.api import load_run
from trace_doctor.ingest.parsers.log_kinds import classify_message, versions_in
from trace_doctor.knowledge.hyperparams import sft_lora_lr
from trace_doctor.knowledge.renderers import is_vision_language, judge_renderer
from trace_doctor.model import Finding, RunTables
from trace_doctor.rules.engine import run_rules

TRAINING = ROOT / "fixtures" / "training"
RULES = ["renderer-model-mismatch", "config-risk", "known-bad-dependency", "renderer-kl-step0"]
CONFIG_FIXTURES = sorted(p.name for p in TRAINING.glob("config_*"))


@cache
def _analysed(path: Path) -> tuple[list[Finding], dict[str, str]]:
    found, outcomes, _ = run_rules(load_run(path), select=RULES)
    return found, {o.rule: o.status for o in outcomes}


def _prints(path: Path, rule: str) -> dict[str, Finding]:
    return {f.fingerprint: f for f in _analysed(path)[0] if f.rule == rule}


# --- the fixture runs -------------------------------------------------------------------------


@pytest.mark.parametrize("name", CONFIG_FIXTURES)
def test_fixture_meets_its_expectation(name: str) -> None:
    expected = json.loads((TRAINING / name / "EXPECTED.json").read_text())
    found, _ = _analysed(TRAINING / name)
    fired = {f.rule for f in found}
    mine = set(RULES)
    assert set(expected["must_fire"]) & mine <= fired, expected["shows"]
    assert not (set(expected["must_not_fire"]) & mine & fired), expected["shows"]


def test_other_family_renderer_is_a_high_confidence_warning_citing_the_cookbook_line() -> None:
    finding = _prints(TRAINING / "config_renderer_llama3_on_qwen3", "renderer-model-mismatch")[
        "renderer-model-mismatch:config"
    ]
    assert (finding.severity, finding.confidence) == ("warning", "high")
    assert finding.evidence["recommended"] == ["qwen3", "qwen3_disable_thinking"]
    assert finding.evidence["log_line"]["line"] == 3  # the cookbook's warning, cited rather than repeated
    assert "`llama3`" in finding.message and "`qwen3`" in finding.fix
    assert finding.steps == [0]  # where the mismatch shows: KL at step 0 is explained by it


def test_a_mode_of_the_models_own_template_is_info() -> None:
    finding = _prints(TRAINING / "config_renderer_instruct_with_thinking", "renderer-model-mismatch")[
        "renderer-model-mismatch:config"
    ]
    assert (finding.severity, finding.confidence) == ("info", "medium")
    assert finding.evidence["verdict"] == "variant"


def test_checkpoint_trained_with_another_family_is_a_warning() -> None:
    (finding,) = _prints(TRAINING / "config_renderer_checkpoint_mismatch", "renderer-model-mismatch").values()
    assert finding.fingerprint == "renderer-model-mismatch:checkpoint" and finding.severity == "warning"
    assert (finding.evidence["checkpoint_renderer"], finding.evidence["current_renderer"]) == ("llama3", "qwen3")


def test_sft_step0_nll_fires_with_the_wrong_renderer_and_not_on_hard_data() -> None:
    prints = _prints(TRAINING / "config_sft_wrong_renderer_nll", "renderer-model-mismatch")
    nll = prints["renderer-model-mismatch:sft-nll-step0"]
    assert nll.evidence["metric"] == "test/nll" and nll.evidence["value"] > 3.0
    assert nll.confidence == "medium"  # corroborated by the config's other-family renderer
    _, status = _analysed(TRAINING / "config_sft_hard_data_nll")
    assert status["renderer-model-mismatch"] == "passed"


def test_step0_nll_alone_is_a_low_confidence_hint() -> None:
    rows = [{"step": i, "train_mean_nll": 2.6 - 0.03 * i, "num_loss_tokens": 1000.0} for i in range(30)]
    run = run_from_rows(rows, trainer="sl", model_name="Qwen/Qwen3-8B", renderer_name="qwen3")
    found, outcomes, _ = run_findings(run, ["renderer-model-mismatch"])
    (finding,) = found
    assert (finding.severity, finding.confidence) == ("info", "low")
    resumed = run_from_rows([{**r, "step": r["step"] + 100} for r in rows], trainer="sl")
    _, outcomes, _ = run_findings(resumed, ["renderer-model-mismatch"])
    assert outcomes["renderer-model-mismatch"].status == "passed"  # no step 0: no base-model NLL


def test_config_risks_are_one_finding_each_with_the_values_quoted() -> None:
    temp = _prints(TRAINING / "config_temperature_with_kl", "config-risk")["config-risk:temperature-with-kl-penalty"]
    assert temp.evidence == {
        "temperature": 0.7,
        "kl_penalty_coef": 0.1,
        "source": "rl/train.py Config.temperature",
    }
    sub = _prints(TRAINING / "config_substeps_importance_sampling", "config-risk")["config-risk:substeps-without-ppo"]
    assert (sub.evidence["num_substeps"], sub.evidence["loss_fn"], sub.confidence) == (2, "importance_sampling", "high")
    lr = _prints(TRAINING / "config_rl_lr_too_high", "config-risk")["config-risk:rl-learning-rate-high"]
    assert lr.evidence["learning_rate"] == 0.01 and "0.00047" in lr.message  # get_lr for Qwen3-8B
    for twin in ("config_kl_penalty_temperature_1", "config_substeps_ppo", "config_renderer_qwen3_thinking_ok"):
        assert _analysed(TRAINING / twin)[1]["config-risk"] == "passed", twin


def test_config_risk_passes_healthy_sft_and_abstains_without_config() -> None:
    _, status = _analysed(TRAINING / "config_sft_hard_data_nll")
    assert status["config-risk"] == "passed"  # learning rate 2e-4 is 0.43x get_lr, train_on_what last_assistant
    run = run_from_rows([{"step": i, "progress/batch": i, "env/all/reward/total": 0.5} for i in range(5)])
    _, outcomes, _ = run_findings(run, ["config-risk"])
    assert outcomes["config-risk"].status == "not_applicable"


def test_very_low_rl_learning_rate_is_info() -> None:
    run = RunTables()
    run.meta.trainer, run.meta.model_name = "rl", "Qwen/Qwen3-8B"
    run.meta.config = {"learning_rate": 5e-7, "temperature": 1.0, "kl_penalty_coef": 0.0, "num_substeps": 1}
    from trace_doctor.model import InputFile

    run.inputs.append(InputFile("config", "config.json", records=1))
    found, _, _ = run_findings(run, ["config-risk"])
    assert [(f.fingerprint, f.severity) for f in found] == [("config-risk:rl-learning-rate-low", "info")]


# --- versions that fit the run ----------------------------------------------------------------


def test_environment_check_lines_are_parsed() -> None:
    assert versions_in("tinker SDK: 0.15.2", freeze_file=False) == [("tinker", "0.15.2", "version line")]
    built = "Python: 3.14.0 (main, Oct  7 2025, 15:35:12) [Clang 17.0.0 (clang-1700.3.19.1)]"
    assert versions_in(built, freeze_file=False) == [("python", "3.14.0", "version line")]
    assert versions_in("Python 3.12.1", freeze_file=False) == [("python", "3.12.1", "version line")]
    # Only Python's line carries a build in parentheses; other text after a version is prose.
    assert versions_in("torch: 2.10.0 (cuda)", freeze_file=False) == []
    assert versions_in("numpy 2 arrays", freeze_file=False) == []


def test_old_sdk_is_upgrade_available_and_text_model_gets_no_vl_finding() -> None:
    prints = _prints(TRAINING / "config_env_check_old_sdk", "known-bad-dependency")
    assert set(prints) == {"known-bad-dependency:python-3.14", "known-bad-dependency:tinker-upgrade-available"}
    sdk = prints["known-bad-dependency:tinker-upgrade-available"]
    assert sdk.severity == "info" and sdk.title.startswith("Upgrade available") and sdk.evidence["version"] == "0.15.2"
    vl = _prints(TRAINING / "config_vl_old_transformers", "known-bad-dependency")
    assert list(vl) == ["known-bad-dependency:transformers-pre-5-vl"]
    _, status = _analysed(TRAINING / "config_text_old_transformers")
    assert status["known-bad-dependency"] == "passed"


def test_python_314_fits_the_run_it_judges(tmp_path: Path) -> None:
    # The fixture trained 40 steps on Python 3.14: pkg_resources did not stop it, so it is info.
    on_trained = _prints(TRAINING / "config_env_check_old_sdk", "known-bad-dependency")
    assert on_trained["known-bad-dependency:python-3.14"].severity == "info"
    assert "This run trained" in on_trained["known-bad-dependency:python-3.14"].message
    # A launch that died importing pkg_resources keeps the warning, even next to trained steps.
    run = tmp_path / "run"
    shutil.copytree(TRAINING / "config_env_check_old_sdk", run)
    with (run / "logs.log").open("a") as log:
        log.write("__main__:12 [ERROR] ModuleNotFoundError: No module named 'pkg_resources'\n")
    died = _prints(run, "known-bad-dependency")
    assert died["known-bad-dependency:python-3.14"].severity == "warning"


def test_sdk_without_server_sessions_is_an_error() -> None:
    from trace_doctor.knowledge.versions import bad_versions

    (record,) = bad_versions("tinker", "0.2.2")
    assert record.id == "tinker-no-session" and record.severity == "error"
    assert [r.id for r in bad_versions("tinker", "0.3.0")] == ["tinker-upgrade-available"]
    assert bad_versions("tinker", "0.23.0") == []


# --- the registry -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "renderer", "verdict"),
    [
        ("Qwen/Qwen3-8B", "qwen3", "recommended"),
        ("Qwen/Qwen3-30B-A3B", "qwen3_disable_thinking", "recommended"),
        ("Qwen/Qwen3-8B:peft:131072", "qwen3", "recommended"),  # model_info strips `:` suffixes
        ("deepseek-ai/DeepSeek-V3.1", "deepseekv3_disable_thinking", "recommended"),  # alias of deepseekv3
        ("Qwen/Qwen3-4B-Instruct-2507", "qwen3", "variant"),
        ("Qwen/Qwen3-8B-Base", "qwen3", "chat-on-base"),  # a base model taught its family's chat template
        ("meta-llama/Llama-3.2-1B", "qwen3", "other-family"),
        ("Qwen/Qwen3-8B", "role_colon", "other-family"),
        ("meta-llama/Llama-3.1-8B-Instruct", "qwen3", "other-family"),
        ("moonshotai/Kimi-K2.5", "kimi_k2", "other-family"),
        # Kimi-K2.6 lists its own names, which get_renderer also aliases to kimi_k25*: recommended, not a variant.
        ("moonshotai/Kimi-K2.6", "kimi_k26", "recommended"),
        ("moonshotai/Kimi-K2.6", "kimi_k26_disable_thinking", "recommended"),
        ("moonshotai/Kimi-K2.6", "kimi_k25", "variant"),
        ("openai/gpt-oss-20b", "gpt_oss_high_reasoning", "variant"),
        ("Qwen/Qwen3-8B", "my_custom_renderer", "unknown-renderer"),
    ],
)
def test_registry_verdicts(model: str, renderer: str, verdict: str) -> None:
    judgement = judge_renderer(model, renderer)
    assert judgement is not None and judgement.verdict == verdict


def test_unknown_model_is_not_judged() -> None:
    assert judge_renderer("acme/SuperModel-7B", "llama3") is None
    run = RunTables()
    run.meta.model_name, run.meta.renderer_name = "acme/SuperModel-7B", "llama3"
    from trace_doctor.model import InputFile

    run.inputs.append(InputFile("config", "config.json", records=1))
    _, outcomes, _ = run_findings(run, ["renderer-model-mismatch"])
    result = outcomes["renderer-model-mismatch"]
    assert result.status == "not_applicable" and "not in the cookbook's model_info.py" in result.reason


def test_vision_language_from_model_or_renderer() -> None:
    assert is_vision_language("Qwen/Qwen3-VL-30B-A3B-Instruct", None) is True
    assert is_vision_language("Qwen/Qwen3.5-9B", None) is True
    assert is_vision_language("Qwen/Qwen3-8B", "qwen3") is False
    assert is_vision_language("acme/Thing-VL-2B", None) is True
    assert is_vision_language("acme/Thing-2B", None) is None
    assert is_vision_language(None, "qwen3_vl_instruct") is True


def test_get_lr_matches_the_cookbook_formula() -> None:
    # dphuang2's corpus config uses exactly get_lr("Qwen/Qwen3-4B-Instruct-2507").
    assert sft_lora_lr("Qwen/Qwen3-4B-Instruct-2507") == pytest.approx(0.0004905250962784578, rel=1e-12)
    assert sft_lora_lr("openai/gpt-oss-20b") is None


def test_extension_property_line_is_a_renderer_event() -> None:
    message = (
        "WARNING: Using train_on_what=ALL_ASSISTANT_MESSAGES with a renderer that does not satisfy the extension "
        "property (has_extension_property=False). This means earlier assistant messages ..."
    )
    classified = classify_message(message, "WARNING", "tinker_cookbook.renderers.base")
    assert classified is not None and classified.kind == "renderer"
    assert classified.fields == {"problem": "extension-property", "train_on_what": "ALL_ASSISTANT_MESSAGES"}


# --- the real corpus ----------------------------------------------------------------------------

BZZ = "bzz-tinker-cookbook/data/context_distillation/logs/"


@pytest.mark.skipif(not CORPUS.exists(), reason=CORPUS_MISSING)
@pytest.mark.parametrize("config", sorted(str(p.parent.relative_to(CORPUS)) for p in CORPUS.rglob("config.json")))
def test_corpus_config_runs(config: str) -> None:
    """Every corpus config: only sushantmehta's num_substeps=2 runs show a config risk; no renderer
    is from another family (Qwen3-4B-Instruct-2507 + qwen3_instruct, Qwen3-30B-A3B + its
    disable-thinking variant, gpt-oss-20b without renderer_name)."""
    found, status = _analysed(CORPUS / config)
    risky = {f.fingerprint for f in found if f.rule == "config-risk"}
    substeps = config.endswith(("logs_v2p5", "logs_v2p7"))
    assert risky == ({"config-risk:substeps-without-ppo"} if substeps else set())
    renderer = {f.fingerprint for f in found if f.rule == "renderer-model-mismatch"}
    expected = {"renderer-model-mismatch:extension-property"} if config.endswith("exp1_off_policy") else set()
    assert renderer == expected
    assert not any(f.rule == "known-bad-dependency" for f in found)


def test_bzz_extension_property_warning_is_one_finding_with_its_count() -> None:
    path = corpus_path(BZZ + "exp1_off_policy")
    (finding,) = _prints(path, "renderer-model-mismatch").values()
    assert (finding.severity, finding.confidence) == ("info", "low")
    assert finding.evidence["log_line"]["repeats"] == 3840  # 30 steps x 128 examples, one warning each
    assert "3,840 times" in finding.message


def test_tinker_rl_lab_sft_nll_below_the_line_stays_silent() -> None:
    path = corpus_path("tinker-rl-lab/experiments/results/distillation_off_metrics.jsonl")
    _, status = _analysed(path)
    assert status["renderer-model-mismatch"] == "passed"  # step-0 train_mean_nll 1.79 < 2.0
