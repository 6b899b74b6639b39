"""Which training-health series a run has, and which panel shows the shape each quality rule judges.

The report's "Training health" view draws small multiples over steps: reward, the share of
constant-reward groups, entropy, sampler-trainer KL, truncation at `max_tokens`, and for SFT/DPO
the loss. This module only *chooses* (from the metric keys the run logged, FORMATS.md 1.3/1.5);
the renderer draws what it chose and marks what the findings say. Keys are matched by family, never
one spelling: `env/all/…` or `env/<tag>/…`, the recipe's bare `reward/total`, `test/…`/`eval/…` eval
keys drawn as eval series, never as training ones.

    >>> [p.id for p in health_panels(["step", "env/all/reward/total", "optim/entropy", "time/total"])]
    ['reward', 'entropy']
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import polars as pl

from trace_doctor.knowledge.tinker import KL_SAMPLE_TRAIN_SUFFIXES, KL_SAMPLE_TRAIN_V2, TEACHER_KL, is_eval_key

ENV_KEY = re.compile(r"^env/(?P<tag>[^/]+)/(?P<metric>.+)$")
# async 0.6.1 repeats each eval key under `eval/by_step|by_cost|by_time/…`: aliases, not series.
EVAL_ALIAS = re.compile(r"^eval/(by_step|by_cost|by_time|snapshot|timing)/")
ENV_TAGS_MAX = 3  # a panel with more tags than this draws env/all (or the first tags) only
EVAL_SERIES_MAX = 2

Role = Literal["train", "eval"]


@dataclass(frozen=True)
class Series:
    """One metric column drawn on a panel: training rows, or eval rows/keys (drawn distinctly)."""

    column: str
    label: str
    role: Role = "train"


@dataclass(frozen=True)
class Panel:
    """One small multiple: its series, its y-axis label, and the reference lines it carries."""

    id: str  # one of PANEL_IDS
    title: str
    y_label: str
    series: tuple[Series, ...]
    # A reference the rules judge against: the stable-KL band (below it is healthy), or the
    # configured max_tokens a completion length is cut at.
    band: float | None = None
    limit: float | None = None
    limit_label: str = ""
    # Whether the values are shares in [0, 1] (the axis is fixed to it so panels compare).
    share: bool = False
    # Steps drawn as thin vertical lines: the recorded sampler-weight saves on the KL panel, so a KL
    # that resets at each save (a stale sampler) lines up with them.
    events_at: tuple[int, ...] = ()
    events_label: str = ""


# Every panel the view can draw. A rule names the ones its findings are shaded on (`Rule(panels=...)`);
# a finding whose evidence names a drawn metric (`evidence["metric"]`) is marked where that metric is.
PANEL_IDS = ("reward", "groups", "entropy", "kl", "truncation", "loss")
EVIDENCE_METRIC_KEYS = ("metric", "metrics", "key", "column")


def _env_family(columns: Iterable[str], metric: str) -> list[str]:
    """`env/<tag>/<metric>` training columns, env/all alone when present, else at most ENV_TAGS_MAX tags."""
    found = [c for c in columns if (m := ENV_KEY.match(c)) and m["metric"] == metric]
    if f"env/all/{metric}" in found:
        return [f"env/all/{metric}"]
    return sorted(found)[:ENV_TAGS_MAX]


def _eval_family(columns: Iterable[str], suffix: str) -> list[str]:
    found = [c for c in columns if is_eval_key(c) and not EVAL_ALIAS.match(c) and c.endswith(suffix)]
    return sorted(found, key=lambda c: ("env/all/" not in c, len(c), c))[:EVAL_SERIES_MAX]


def _label(column: str) -> str:
    """A legend name: the key without the prefixes every series of its panel shares."""
    for prefix in ("env/all/", "optim/"):
        column = column.replace(prefix, "", 1) if column.startswith(prefix) or "/" + prefix in column else column
    return column.replace("by_group/", "")


def _max_tokens(config: dict[str, Any]) -> float | None:
    value = config.get("max_tokens")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return float(value)


def sampler_saves(checkpoints: pl.DataFrame) -> list[int]:
    """Steps of the checkpoints the run recorded with sampler weights (checkpoints.jsonl): rolling
    checkpoints hold none, and a record without `batch` has no step."""
    if checkpoints.is_empty() or "batch" not in checkpoints.columns:
        return []
    recorded = checkpoints.filter(pl.col("batch").is_not_null())
    if "rolling" in recorded.columns:
        recorded = recorded.filter(~pl.col("rolling").fill_null(False))
    if "sampler_path" in recorded.columns:
        recorded = recorded.filter(pl.col("sampler_path").is_not_null())
    return sorted({int(b) for b in recorded["batch"].to_list()})


def health_panels(
    columns: Iterable[str],
    config: dict[str, Any] | None = None,
    *,
    max_stable_kl: float = 0.01,
    saves: tuple[int, ...] = (),
) -> list[Panel]:
    """The panels a run's metric columns can fill, in reading order; empty when it has none of them."""
    columns = [c for c in columns if isinstance(c, str)]
    config = config or {}
    panels: list[Panel] = []

    def add(panel_id: str, title: str, y_label: str, train: list[str], evals: list[str] = (), **extra: Any) -> None:
        series = [Series(c, _label(c)) for c in train] + [Series(c, _label(c), "eval") for c in evals]
        if series:
            panels.append(Panel(panel_id, title, y_label, tuple(series), **extra))

    reward = _env_family(columns, "reward/total") or (["reward/total"] if "reward/total" in columns else [])
    add("reward", "Reward", "mean total reward", reward, _eval_family(columns, "reward/total"))
    groups: list[str] = []
    for metric in ("by_group/frac_mixed", "by_group/frac_all_good", "by_group/frac_all_bad"):
        groups += _env_family(columns, metric)
    add("groups", "Groups with mixed vs constant reward", "share of groups", groups, share=True)
    add("entropy", "Entropy", "nats/token", [c for c in columns if c == "optim/entropy"])
    # v2 first: always >= 0, the one the rules judge (FORMATS.md 1.5); a finding's mark sits on it.
    kl = sorted(
        (c for c in columns if not is_eval_key(c) and (c.endswith(KL_SAMPLE_TRAIN_SUFFIXES) or c == TEACHER_KL)),
        key=lambda c: (not c.endswith(KL_SAMPLE_TRAIN_V2), c),
    )
    add(
        "kl",
        "Sampler–trainer KL",
        "KL (nats/token)",
        kl,
        band=max_stable_kl,
        events_at=tuple(saves),
        events_label="sampler weights saved" if saves else "",
    )
    stopped = _env_family(columns, "stop/max_tokens")
    if stopped:
        add("truncation", "Stopped at max_tokens", "share of samples", stopped, share=True)
    elif (limit := _max_tokens(config)) is not None:
        lengths = _env_family(columns, "ac_tokens_per_turn")
        add(
            "truncation",
            "Completion length vs max_tokens",
            "tokens per turn",
            lengths,
            limit=limit,
            limit_label=f"max_tokens {limit:g}",
        )
    loss_train = [c for c in ("train_mean_nll", "dpo_loss") if c in columns]
    loss_eval = [c for c in columns if is_eval_key(c) and not EVAL_ALIAS.match(c) and c.endswith("nll")]
    if loss_train or loss_eval:
        unit = "DPO loss" if loss_train == ["dpo_loss"] else "NLL (nats/token)"
        add("loss", "Loss", unit, loss_train, sorted(loss_eval)[:EVAL_SERIES_MAX])
    return panels


def evidence_metrics(evidence: dict[str, Any]) -> list[str]:
    """The metric keys a finding's evidence names (`metric`, `metrics`, ...), as text."""
    names: list[str] = []
    for key in EVIDENCE_METRIC_KEYS:
        value = evidence.get(key)
        if isinstance(value, str):
            names.append(value)
        elif isinstance(value, (list, tuple)):
            names += [v for v in value if isinstance(v, str)]
    return names


def panels_of_finding(evidence: dict[str, Any], panels: list[Panel], rule_panels: tuple[str, ...]) -> list[str]:
    """The panels a finding is marked on: where its evidence's metric is drawn, else `rule_panels` (the
    panels its rule declares) that the run has."""
    named = set(evidence_metrics(evidence))
    by_metric = [p.id for p in panels if named & {s.column for s in p.series}]
    if by_metric:
        return by_metric
    present = {p.id for p in panels}
    return [panel_id for panel_id in rule_panels if panel_id in present]
