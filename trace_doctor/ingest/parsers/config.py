"""`config.json` -> RunMeta, and the trainer kind inferred from config keys or metric keys."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trace_doctor.ingest.reading.deep_json import cap_depth
from trace_doctor.ingest.reading.jsonl import as_int64, decode_json, read_bytes
from trace_doctor.knowledge.tinker import KL_SAMPLE_TRAIN_V1, RL_BATCH_KEY, RL_ENV_PREFIX, TEACHER_KL
from trace_doctor.model import IngestWarning, InputFile, RunMeta

# Real trainer configs nest a handful of levels; the config travels to renderers and the bundle,
# which copy and walk it recursively, so anything deeper is kept as JSON text.
MAX_CONFIG_DEPTH = 32


def find_setting(obj: Any, key: str, depth: int = 0) -> Any:
    """First value of `key` anywhere in nested dicts (older configs nest renderer_name)."""
    if depth > 8:
        return None
    if isinstance(obj, dict):
        if obj.get(key) not in (None, ""):
            return obj[key]
        for value in obj.values():
            found = find_setting(value, key, depth + 1)
            if found not in (None, ""):
                return found
    elif isinstance(obj, list):
        for value in obj:
            found = find_setting(value, key, depth + 1)
            if found not in (None, ""):
                return found
    return None


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    return float(value) if isinstance(value, (int, float)) else None


def trainer_from_config(cfg: dict[str, Any]) -> tuple[str, str | None]:
    """(trainer, mode) from the trainer Config's distinctive fields (FORMATS.md 3.3)."""
    keys = set(cfg)
    if "dpo_beta" in keys or "reference_model_name" in keys:
        return "dpo", None
    if keys & {"n_teacher_targets", "teacher_concurrency"}:
        return "distillation", "off_policy"
    if "dataset_configs" in keys or any("teacher" in k for k in keys):
        return "distillation", "on_policy"
    rl_markers = {
        "async_config",
        "stream_minibatch_config",
        "kl_penalty_coef",
        "loss_fn",
        "remove_constant_reward_groups",
        "num_substeps",
        "max_tokens",
    }
    if keys & rl_markers:
        if cfg.get("async_config"):
            return "rl", "async"
        if cfg.get("stream_minibatch_config"):
            return "rl", "stream"
        return "rl", "sync"
    sl_markers = {
        "infrequent_eval_every",
        "save_every_tokens",
        "lr_schedule",
        "submit_ahead",
        "infrequent_evaluator_builders",
        "num_epochs",
    }
    if keys & sl_markers:
        return "sl", None
    return "unknown", None


def trainer_from_metric_keys(keys: Iterable[str]) -> str:
    """Trainer kind from the metric keys alone, for runs without config.json."""
    keys = set(keys)
    if "dpo_loss" in keys:
        return "dpo"
    if TEACHER_KL in keys or any(k.startswith(TEACHER_KL + "/") for k in keys):
        return "distillation"
    if any(k.startswith(RL_ENV_PREFIX) or k.endswith(KL_SAMPLE_TRAIN_V1) for k in keys) or RL_BATCH_KEY in keys:
        return "rl"
    if keys & {"train_mean_nll", "num_loss_tokens", "train/loss", "grad_step"}:
        return "sl"
    return "unknown"


def parse_config(path: Path, warnings: list[IngestWarning]) -> tuple[RunMeta, InputFile]:
    info = InputFile(kind="config", path=str(path))
    meta = RunMeta()
    data = read_bytes(path, warnings)
    if data is None:
        info.skipped = 1
        return meta, info
    try:
        cfg = decode_json(data)
    except Exception as exc:  # noqa: BLE001 - a broken config is reported, the run is still analysed
        warnings.append(IngestWarning(str(path), None, f"config is not valid JSON: {str(exc)[:200]}"))
        info.skipped = 1
        return meta, info
    if not isinstance(cfg, dict):
        warnings.append(IngestWarning(str(path), None, f"config is a JSON {type(cfg).__name__}, expected an object"))
        info.skipped = 1
        return meta, info
    info.records = 1
    cfg, flattened = cap_depth(cfg, MAX_CONFIG_DEPTH)
    if flattened:
        warnings.append(
            IngestWarning(
                str(path),
                None,
                f"{flattened} value(s) nested deeper than {MAX_CONFIG_DEPTH} levels are kept as JSON text",
            )
        )
    meta.config = cfg
    meta.trainer, meta.trainer_mode = trainer_from_config(cfg)
    model = find_setting(cfg, "model_name") or find_setting(cfg, "base_model")
    meta.model_name = model if isinstance(model, str) else None
    renderer = find_setting(cfg, "renderer_name")
    meta.renderer_name = renderer if isinstance(renderer, str) else None
    meta.lora_rank = as_int64(cfg.get("lora_rank"))
    meta.temperature = _as_float(cfg.get("temperature"))
    trace = cfg.get("enable_trace")
    meta.enable_trace = trace if isinstance(trace, bool) else None
    meta.submit_ahead = as_int64(cfg.get("submit_ahead"))
    return meta, info
