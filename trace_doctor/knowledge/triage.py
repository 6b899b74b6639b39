"""The debug guide's triage order and which findings are symptoms of which causes.

Data only: the triage (trace_doctor/triage) reads it to link findings and to attribute each lost
second to one cause. The guide walks a slow run in this order — environment, pipelining, the
timing breakdown, a profile, the GIL, then the network and the service — because each stage
explains most of what the later ones would see: an unpipelined loop also looks "slow every
step", a GIL held by user code also starves the heartbeat. A second of loss two findings both
claim is therefore given to the earlier stage.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    """One stage of the guide's decision tree: its name (what a Rule declares) and what it looks at."""

    name: str
    doc: str


# The guide's decision tree, in order. Which rule is a cause at which stage is declared on each Rule
# (`Rule(stage=...)`, rules/checks/); registering a rule with a stage not named here fails.
STAGES: tuple[Stage, ...] = (
    Stage(
        "progress",
        "Whether the run is still making progress: a run that crashed, hung or was killed is the first thing "
        "to say, before anything about the steps it did run.",
    ),
    Stage("environment", "Dependency versions and decoded errors: a known-bad setup explains everything after it."),
    Stage(
        "training quality",
        "What the run learned, not how fast: these findings lose no seconds, so they never take a second "
        'from a time cause; the verdict names the worst of them on its own "Training:" line.',
    ),
    Stage(
        "checkpoints",
        "What the run left behind — checkpoints that can be sampled and that last — not what it learned: kept out "
        'of the verdict\'s "Training:" line; its findings lose no seconds either.',
    ),
    Stage("pipelining", "Whether calls are submitted ahead: an unpipelined loop also looks slow on every step."),
    Stage("timing breakdown", "The step's phases: data loading, scheduled evaluations and saves, warm-up."),
    Stage("profile", "Where the main thread spends its time: serialization, CPU work, blocking calls."),
    Stage("GIL", "User code holding the GIL starves the SDK thread, and the heartbeat with it."),
    Stage("network and service", "Retried requests and results that arrive late for reasons on the service side."),
    Stage("symptoms", "Symptoms no cause explained stand last: the time they saw is real, its cause unknown."),
    Stage(
        "comparison",
        "Comparisons with a baseline: their seconds are relative to another run, not part of this run's account.",
    ),
)
STAGE_NAMES: tuple[str, ...] = tuple(stage.name for stage in STAGES)

# Time that is spent by design, not lost to a problem: it is shown in the account, never "fixed".
BENIGN_TIME = frozenset({"warmup-slowness", "scheduled-work"})
# Time the user's code cannot win back: the service's side. Shown, but not in the counterfactual.
SERVICE_TIME = frozenset({"server-side-wait"})


@dataclass(frozen=True)
class SymptomOf:
    """A symptom (a rule, or one finding of a rule by its fingerprint) and the causes that can explain it.

    `pervasive`: the symptom is about every step (steady slowness), so only a cause present on most
    steps (or measured over the whole run) explains it; otherwise a cause explains the symptom where
    the two overlap in time or steps.
    """

    symptom: str
    causes: tuple[str, ...]
    pervasive: bool = False


SYMPTOMS: tuple[SymptomOf, ...] = (
    # "Every step slower than the work needs" is what an unpipelined loop, slow data loading, CPU
    # work or serialization on the main thread, a starved SDK thread or a slow service look like.
    SymptomOf(
        "steady-slowness",
        (
            "pipelining-gap",
            "get-batch-bottleneck",
            "serialization-stall",
            "cpu-bound-main-thread",
            "blocking-call-in-async",
            "gil-stall",
            "server-side-wait",
        ),
        pervasive=True,
    ),
    # A spike is explained by a stall, a retry storm or slow data loading at that step.
    SymptomOf(
        "inconsistent-step-times",
        (
            "gil-stall",
            "blocking-call-in-async",
            "request-retries",
            "heartbeat-stall",
            "get-batch-bottleneck",
            "serialization-stall",
            "server-side-wait",
        ),
    ),
    # The SDK's own sync-from-async warning, decoded as a known error, is the blocking call's evidence.
    SymptomOf("decoded-error:sync-from-async", ("blocking-call-in-async",)),
    # The heartbeat runs on the SDK thread: it fails when that thread is starved, or on the network.
    SymptomOf("heartbeat-stall", ("gil-stall", "blocking-call-in-async", "request-retries")),
    # KL that rises between saves and resets at each is the stale sampler's doing, not the learning rate's.
    SymptomOf("kl-drift", ("stale-sampler",)),
    # Entropy and constant-reward groups move together (FORMATS 1.5: collapse toward 0 goes with
    # frac_mixed -> 0); which explains which depends on the reward. A task the policy has solved makes
    # every group all-correct and the sampler deterministic: the entropy fall is the saturation's
    # symptom (entropy-collapse fingerprints it `:saturated`). Otherwise a collapsed sampler draws the
    # same completion for every sample of a prompt, so its groups get one reward: the constant groups
    # (all-bad or split) are the collapse's symptom.
    SymptomOf("entropy-collapse:saturated", ("constant-reward-groups",)),
    SymptomOf("constant-reward-groups:all-bad", ("entropy-collapse",)),
    SymptomOf("constant-reward-groups:both", ("entropy-collapse",)),
    SymptomOf("constant-reward-groups:unknown", ("entropy-collapse",)),
    # A GIL stall is the mechanism; the CPU or serialization work holding the GIL is the cause.
    SymptomOf("gil-stall", ("cpu-bound-main-thread", "serialization-stall")),
    # High KL at step 0 is what a renderer from another family looks like in RL (the debug skill's
    # "high KL at step 0 => renderer"); temperature with a KL penalty inflates it too.
    SymptomOf("renderer-kl-step0", ("renderer-model-mismatch",)),
)


def _stage_of_rule() -> dict[str, str]:
    """slug -> the stage its Rule declares. The rule modules import this one (for the stage names), so
    the registry is read when a stage is asked for, not when this module loads."""
    from trace_doctor.rules.catalogue import rule_stages

    return rule_stages()


def stage_of(rule: str) -> int:
    """Position of the rule's stage in the triage order (a slug no rule registers: after every stage)."""
    name = _stage_of_rule().get(rule)
    return STAGE_NAMES.index(name) if name is not None else len(STAGES)


def stage_rules(name: str) -> frozenset[str]:
    """The rule slugs of one stage by its name (empty for an unknown stage)."""
    return frozenset(slug for slug, stage in _stage_of_rule().items() if stage == name)


def __getattr__(name: str) -> frozenset[str]:
    """Stage memberships read as constants, built from the rules' declarations on first use:
    TRAINING_QUALITY (what the verdict's "Training:" line is chosen from), COMPARISON_RULES and
    PROGRESS_RULES (a run that stopped: the verdict says so first)."""
    stage = {
        "TRAINING_QUALITY": "training quality",
        "COMPARISON_RULES": "comparison",
        "PROGRESS_RULES": "progress",
    }.get(name)
    if stage is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return stage_rules(stage)
