"""Which renderer the cookbook recommends for which model, as data (renderer-model-mismatch reads it).

Source: thinking-machines-lab/tinker-cookbook `tinker_cookbook/model_info.py`
(`get_recommended_renderer_names`: `ModelAttributes.recommended_renderers`, first = most recommended)
at HEAD 9dfcc3a2cf44432d621a01005073dc6d76a1e87a (2026-08-19). Every commit that touched the file
(f77a8a3f 2025-09-30 ... 9dfcc3a2) was evaluated: models the registry dropped keep the list of the
last commit that had them (Qwen3-0.6B..14B, Qwen3-4B, Llama-3.2-1B/3B-Instruct: aa602f58
2026-04-23; Qwen2.5-VL: f77a8a3f), because a run from that era used them. Renderer names and
their one-line descriptions come from `renderers/__init__.py` `get_renderer` at the same HEAD.

Lists the registry changed are kept at their newest value: the older ones were fixes (Kimi-K2.5
got `kimi_k2` until 0269324c "Fix get_recommended_renderer returning kimi_k2 for Kimi-K2.5";
Qwen3-VL-*-Instruct got the thinking `qwen3_vl` until 92d36932 "correctly omit <think> tags for
VL Instruct models"), except DeepSeek-V3.1's `deepseekv3_disable_thinking`, recommended until
92d36932 and since an alias of `deepseekv3` (same renderer class), which ALIASES maps.

A model missing here is unknown: the rule abstains rather than guess its family.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

SOURCE_COMMIT = "9dfcc3a2cf44432d621a01005073dc6d76a1e87a"


@dataclass(frozen=True)
class ModelRenderers:
    """A model's recommended renderers (most recommended first), its chat-template family, and kind."""

    recommended: tuple[str, ...]
    family: str  # the chat template the model was post-trained on (a base model: its chat sibling's)
    is_chat: bool = True
    is_vl: bool = False


# Renderer tuples of model_info.py, spelled as there.
_LLAMA3 = ("llama3",)
_ROLE_COLON = ("role_colon",)
_QWEN3 = ("qwen3", "qwen3_disable_thinking")
_QWEN3_INSTRUCT = ("qwen3_instruct",)
_QWEN3_VL_INSTRUCT = ("qwen3_vl_instruct",)
_QWEN3_5 = ("qwen3_5", "qwen3_5_disable_thinking")
_QWEN3_8 = ("qwen3_8_xhigh_reasoning", "qwen3_8_disable_thinking", "qwen3_8_medium_reasoning", "qwen3_8_low_reasoning")
_DEEPSEEKV3 = ("deepseekv3", "deepseekv3_thinking")
_GPT_OSS = ("gpt_oss_no_sysprompt", "gpt_oss_medium_reasoning")
_KIMI_K2 = ("kimi_k2",)
_KIMI_K25 = ("kimi_k25", "kimi_k25_disable_thinking")
_KIMI_K26 = ("kimi_k26", "kimi_k26_disable_thinking", "kimi_k26_preserve_thinking")
_NEMOTRON3 = ("nemotron3", "nemotron3_disable_thinking", "nemotron3_preserve_thinking")
_NEMOTRON3_SUPER = _NEMOTRON3 + ("nemotron3_low_thinking",)
_NEMOTRON3_ULTRA = (
    "nemotron3_ultra",
    "nemotron3_ultra_disable_thinking",
    "nemotron3_ultra_medium_thinking",
    "nemotron3_ultra_preserve_thinking",
)
_NEMOTRON3_LIGHTNING = ("nemotron3_ultra", "nemotron3_ultra_disable_thinking", "nemotron3_ultra_preserve_thinking")


def _base(family: str, *, vl: bool = False) -> ModelRenderers:
    return ModelRenderers(_ROLE_COLON, family, is_chat=False, is_vl=vl)


MODELS: dict[str, ModelRenderers] = {
    # Llama 3
    "meta-llama/Llama-3.1-8B-Instruct": ModelRenderers(_LLAMA3, "llama3"),
    "meta-llama/Llama-3.3-70B-Instruct": ModelRenderers(_LLAMA3, "llama3"),
    "meta-llama/Llama-3.2-1B-Instruct": ModelRenderers(_LLAMA3, "llama3"),  # until aa602f58
    "meta-llama/Llama-3.2-3B-Instruct": ModelRenderers(_LLAMA3, "llama3"),  # until aa602f58
    "meta-llama/Llama-3.1-8B": _base("llama3"),
    "meta-llama/Llama-3.1-70B": _base("llama3"),
    "meta-llama/Llama-3.2-1B": _base("llama3"),
    "meta-llama/Llama-3.2-3B": _base("llama3"),
    # Qwen3 (hybrid thinking), Instruct-2507 (no thinking), VL, bases
    "Qwen/Qwen3-8B": ModelRenderers(_QWEN3, "qwen3"),
    "Qwen/Qwen3-32B": ModelRenderers(_QWEN3, "qwen3"),
    "Qwen/Qwen3-30B-A3B": ModelRenderers(_QWEN3, "qwen3"),
    "Qwen/Qwen3-0.6B": ModelRenderers(_QWEN3, "qwen3"),  # until aa602f58
    "Qwen/Qwen3-1.7B": ModelRenderers(_QWEN3, "qwen3"),  # until aa602f58
    "Qwen/Qwen3-4B": ModelRenderers(_QWEN3, "qwen3"),  # until aa602f58
    "Qwen/Qwen3-14B": ModelRenderers(_QWEN3, "qwen3"),  # until aa602f58
    "Qwen/Qwen3-4B-Instruct-2507": ModelRenderers(_QWEN3_INSTRUCT, "qwen3"),
    "Qwen/Qwen3-30B-A3B-Instruct-2507": ModelRenderers(_QWEN3_INSTRUCT, "qwen3"),
    "Qwen/Qwen3-235B-A22B-Instruct-2507": ModelRenderers(_QWEN3_INSTRUCT, "qwen3"),
    "Qwen/Qwen3-VL-30B-A3B-Instruct": ModelRenderers(_QWEN3_VL_INSTRUCT, "qwen3", is_vl=True),
    "Qwen/Qwen3-VL-235B-A22B-Instruct": ModelRenderers(_QWEN3_VL_INSTRUCT, "qwen3", is_vl=True),
    "Qwen/Qwen3-8B-Base": _base("qwen3"),
    "Qwen/Qwen3-30B-A3B-Base": _base("qwen3"),
    "Qwen/Qwen3-0.6B-Base": _base("qwen3"),  # f77a8a3f only
    "Qwen/Qwen3-1.7B-Base": _base("qwen3"),  # f77a8a3f only
    "Qwen/Qwen3-4B-Base": _base("qwen3"),  # until aa602f58
    "Qwen/Qwen3-14B-Base": _base("qwen3"),  # until aa602f58
    # Qwen2.5-VL (first commit only)
    "Qwen/Qwen2.5-VL-3B-Instruct": ModelRenderers(("qwen2p5",), "qwen2.5", is_vl=True),
    "Qwen/Qwen2.5-VL-7B-Instruct": ModelRenderers(("qwen2p5",), "qwen2.5", is_vl=True),
    "Qwen/Qwen2.5-VL-32B-Instruct": ModelRenderers(("qwen2p5",), "qwen2.5", is_vl=True),
    "Qwen/Qwen2.5-VL-72B-Instruct": ModelRenderers(("qwen2p5",), "qwen2.5", is_vl=True),
    # Qwen3.5 / 3.6 (one renderer family), Qwen3.8 — all vision-language
    "Qwen/Qwen3.5-4B": ModelRenderers(_QWEN3_5, "qwen3.5", is_vl=True),
    "Qwen/Qwen3.5-9B": ModelRenderers(_QWEN3_5, "qwen3.5", is_vl=True),
    "Qwen/Qwen3.5-27B": ModelRenderers(_QWEN3_5, "qwen3.5", is_vl=True),
    "Qwen/Qwen3.5-35B-A3B": ModelRenderers(_QWEN3_5, "qwen3.5", is_vl=True),
    "Qwen/Qwen3.5-397B-A17B": ModelRenderers(_QWEN3_5, "qwen3.5", is_vl=True),
    "Qwen/Qwen3.6-27B": ModelRenderers(_QWEN3_5, "qwen3.5", is_vl=True),
    "Qwen/Qwen3.6-35B-A3B": ModelRenderers(_QWEN3_5, "qwen3.5", is_vl=True),
    "Qwen/Qwen3.5-9B-Base": _base("qwen3.5", vl=True),
    "Qwen/Qwen3.5-35B-A3B-Base": _base("qwen3.5", vl=True),
    "Qwen/Qwen3.8-27B": ModelRenderers(_QWEN3_8, "qwen3.8", is_vl=True),
    # DeepSeek V3
    "deepseek-ai/DeepSeek-V3.1": ModelRenderers(_DEEPSEEKV3, "deepseekv3"),
    "deepseek-ai/DeepSeek-V3.1-Base": _base("deepseekv3"),
    # gpt-oss
    "openai/gpt-oss-20b": ModelRenderers(_GPT_OSS, "gpt_oss"),
    "openai/gpt-oss-120b": ModelRenderers(_GPT_OSS, "gpt_oss"),
    # Kimi K2.x
    "moonshotai/Kimi-K2-Thinking": ModelRenderers(_KIMI_K2, "kimi_k2"),
    "moonshotai/Kimi-K2.5": ModelRenderers(_KIMI_K25, "kimi_k25", is_vl=True),
    "moonshotai/Kimi-K2.6": ModelRenderers(_KIMI_K26, "kimi_k25", is_vl=True),
    # Nemotron 3
    "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": ModelRenderers(_NEMOTRON3, "nemotron3"),
    "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16": ModelRenderers(_NEMOTRON3_SUPER, "nemotron3"),
    "nvidia/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16": ModelRenderers(_NEMOTRON3_ULTRA, "nemotron3"),
    "nvidia/NVIDIA-Nemotron-3.5-Lightning-30B-A3B-BF16": ModelRenderers(_NEMOTRON3_LIGHTNING, "nemotron3"),
}

# Every renderer `get_renderer` knows, with its chat-template family and its docstring line.
# A family is the model line whose chat template the renderer writes: a renderer of the model's
# own family differs only in a mode (thinking on/off, reasoning effort, Instruct, vision), one of
# another family writes special tokens the model was never trained on.
RENDERERS: dict[str, tuple[str, str]] = {
    "role_colon": ("role_colon", "simple role:content format (base models)"),
    "llama3": ("llama3", "Llama 3 chat format"),
    "qwen2p5": ("qwen2.5", "Qwen2.5 chat format (cookbook 2025-09)"),
    "qwen3": ("qwen3", "Qwen3 with thinking enabled"),
    "qwen3_vl": ("qwen3", "Qwen3 vision-language with thinking"),
    "qwen3_vl_instruct": ("qwen3", "Qwen3 vision-language instruct (no thinking)"),
    "qwen3_disable_thinking": ("qwen3", "Qwen3 with thinking disabled"),
    "qwen3_instruct": ("qwen3", "Qwen3 instruct 2507 (no thinking)"),
    "qwen3_5": ("qwen3.5", "Qwen3.5 VL with thinking"),
    "qwen3_5_disable_thinking": ("qwen3.5", "Qwen3.5 VL with thinking disabled"),
    "qwen3_8_xhigh_reasoning": ("qwen3.8", "Qwen3.8 with thinking (reasoning effort xhigh)"),
    "qwen3_8_medium_reasoning": ("qwen3.8", "Qwen3.8 with thinking, reasoning effort medium"),
    "qwen3_8_low_reasoning": ("qwen3.8", "Qwen3.8 with thinking, reasoning effort low"),
    "qwen3_8_disable_thinking": ("qwen3.8", "Qwen3.8 with thinking disabled"),
    "deepseekv3": ("deepseekv3", "DeepSeek V3 (non-thinking mode)"),
    "deepseekv3_disable_thinking": ("deepseekv3", "DeepSeek V3 non-thinking (alias of deepseekv3)"),
    "deepseekv3_thinking": ("deepseekv3", "DeepSeek V3 thinking mode"),
    "kimi_k2": ("kimi_k2", "Kimi K2 Thinking format"),
    "kimi_k25": ("kimi_k25", "Kimi K2.5 with thinking enabled"),
    "kimi_k25_disable_thinking": ("kimi_k25", "Kimi K2.5 with thinking disabled"),
    "kimi_k26": ("kimi_k25", "Kimi K2.6 with thinking enabled (same tokens as kimi_k25)"),
    "kimi_k26_disable_thinking": ("kimi_k25", "Kimi K2.6 with thinking disabled"),
    "kimi_k26_preserve_thinking": ("kimi_k25", "Kimi K2.6 with thinking, history thinking preserved"),
    "nemotron3": ("nemotron3", "Nemotron-3 with full reasoning"),
    "nemotron3_low_thinking": ("nemotron3", "Nemotron-3 with low-effort reasoning (Super only)"),
    "nemotron3_disable_thinking": ("nemotron3", "Nemotron-3 with reasoning off"),
    "nemotron3_preserve_thinking": ("nemotron3", "Nemotron-3 with full reasoning, history thinking preserved"),
    "nemotron3_ultra": ("nemotron3", "Nemotron-3 Ultra / 3.5 Lightning with full reasoning"),
    "nemotron3_ultra_disable_thinking": ("nemotron3", "Nemotron-3 Ultra / 3.5 Lightning with reasoning off"),
    "nemotron3_ultra_medium_thinking": ("nemotron3", "Nemotron-3 Ultra with medium-effort reasoning"),
    "nemotron3_ultra_preserve_thinking": ("nemotron3", "Nemotron-3 Ultra / 3.5 Lightning, history thinking preserved"),
    "gpt_oss_no_sysprompt": ("gpt_oss", "GPT-OSS without system prompt"),
    "gpt_oss_low_reasoning": ("gpt_oss", "GPT-OSS with low reasoning"),
    "gpt_oss_medium_reasoning": ("gpt_oss", "GPT-OSS with medium reasoning"),
    "gpt_oss_high_reasoning": ("gpt_oss", "GPT-OSS with high reasoning"),
    "tml_v0": ("inkling", "Thinking Machines Inkling (tml-renderers)"),
}

# Names `get_renderer` builds into the same renderer as a recommended name (renderers/__init__.py).
ALIASES: dict[str, str] = {
    "deepseekv3_disable_thinking": "deepseekv3",
    "kimi_k26": "kimi_k25",
    "kimi_k26_disable_thinking": "kimi_k25_disable_thinking",
}

# Renderers that take an image processor (vision-language), from get_renderer's signatures.
VL_RENDERERS = frozenset(
    name for name in RENDERERS if name.startswith(("qwen3_vl", "qwen3_5", "qwen3_8", "kimi_k25", "kimi_k26", "tml_v0"))
)
# A model name that says vision-language by itself (Qwen2.5-VL, Qwen3-VL, Llama-3.2-Vision ...).
VL_MODEL_NAME = re.compile(r"(?:^|[-_/])VL(?:$|[-_])|Vision", re.IGNORECASE)

# "chat-on-base": a base model (registry: role_colon) trained with its own family's chat template —
# how a base model is taught to chat (the cookbook's chat_sl / dpo recipes default to base models).
Verdict = Literal["recommended", "chat-on-base", "variant", "other-family", "unknown-renderer"]


@dataclass(frozen=True)
class RendererJudgement:
    """How `renderer` fits `model`, with what the cookbook recommends instead."""

    verdict: Verdict
    model: str
    renderer: str
    recommended: tuple[str, ...]
    model_family: str
    renderer_family: str | None

    @property
    def rank(self) -> int | None:
        """0 for the most recommended renderer, 1 for the next ... (None when not recommended)."""
        name = recommended_name(self.renderer, self.recommended)
        return self.recommended.index(name) if name is not None else None


def recommended_name(renderer: str, recommended: tuple[str, ...]) -> str | None:
    """The entry of `recommended` that `renderer` is: its own name (Kimi-K2.6 lists `kimi_k26` itself), else
    the name it aliases (`deepseekv3_disable_thinking` builds `deepseekv3`); None when it is neither."""
    if renderer in recommended:
        return renderer
    alias = ALIASES.get(renderer)
    return alias if alias in recommended else None


def model_key(model_name: str) -> str:
    """The registry key of a model name: model_info strips a `:checkpoint` suffix before lookup."""
    return model_name.strip().split(":", 1)[0]


def model_renderers(model_name: str) -> ModelRenderers | None:
    """The model's entry, or None when the cookbook's registry never had it."""
    return MODELS.get(model_key(model_name))


def judge_renderer(model_name: str, renderer_name: str) -> RendererJudgement | None:
    """How the configured renderer fits the model; None for a model the registry does not know."""
    entry = model_renderers(model_name)
    if entry is None:
        return None
    renderer = renderer_name.strip()
    family = RENDERERS[renderer][0] if renderer in RENDERERS else None
    if recommended_name(renderer, entry.recommended) is not None:
        verdict: Verdict = "recommended"
    elif family is None:
        verdict = "unknown-renderer"
    elif family == entry.family:
        verdict = "variant" if entry.is_chat else "chat-on-base"
    else:
        verdict = "other-family"
    return RendererJudgement(verdict, model_key(model_name), renderer, entry.recommended, entry.family, family)


def describe_renderer(renderer_name: str) -> str:
    """`name` (its get_renderer docstring line), or just the name for a custom renderer."""
    known = RENDERERS.get(renderer_name)
    return f"`{renderer_name}` ({known[1]})" if known else f"`{renderer_name}`"


def is_vision_language(model_name: str | None, renderer_name: str | None) -> bool | None:
    """Whether the run is a vision-language one: True / False, or None when nothing says."""
    if renderer_name and renderer_name in VL_RENDERERS:
        return True
    if model_name:
        entry = model_renderers(model_name)
        if entry is not None:
            return entry.is_vl
        if VL_MODEL_NAME.search(model_key(model_name)):
            return True
    if renderer_name and renderer_name in RENDERERS:
        return False  # a known text-only renderer
    return None
