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

# Stages of the guide's decision tree, in order, with the rules that are causes at that stage.
TRIAGE_STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("environment", ("known-bad-dependency", "decoded-error")),
    # What the run learned, not how fast: these findings lose no seconds, so they never take a
    # second from a time cause; the verdict names the worst of them on its own "Training:" line.
    # Some slugs may belong to rules not registered in this build: every consumer tolerates that.
    (
        "training quality",
        (
            "renderer-kl-step0",
            "kl-drift",
            "constant-reward-groups",
            "stale-sampler",
            "entropy-collapse",
            "training-instability",
            "truncated-samples",
            "renderer-model-mismatch",
            "config-risk",
            "response-parse-errors",
            "overfitting",
        ),
    ),
    # What the run left behind (checkpoints that can be sampled, that last), not what it learned: kept out of
    # the verdict's "Training:" line. Its findings lose no seconds either.
    ("checkpoints", ("checkpoint-risk",)),
    ("pipelining", ("pipelining-gap",)),
    ("timing breakdown", ("get-batch-bottleneck", "scheduled-work", "warmup-slowness")),
    (
        "profile",
        ("serialization-stall", "cpu-bound-main-thread", "blocking-call-in-async", "profile-without-async-mode"),
    ),
    ("GIL", ("gil-stall", "heartbeat-stall")),
    ("network and service", ("request-retries", "server-side-wait")),
    # Symptoms that no cause explained stand last: the time they saw is real, its cause unknown.
    ("symptoms", ("steady-slowness", "inconsistent-step-times")),
)

# Time that is spent by design, not lost to a problem: it is shown in the account, never "fixed".
BENIGN_TIME = frozenset({"warmup-slowness", "scheduled-work"})
# Time the user's code cannot win back: the service's side. Shown, but not in the counterfactual.
SERVICE_TIME = frozenset({"server-side-wait"})
# Comparisons with a baseline: their seconds are relative to another run, not part of this run's account.
COMPARISON_RULES = frozenset({"step-time-regression", "quality-regression", "new-finding"})


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


def stage_of(rule: str) -> int:
    """Position of the rule's stage in the triage order (unknown rules last)."""
    for index, (_, rules) in enumerate(TRIAGE_STAGES):
        if rule in rules:
            return index
    return len(TRIAGE_STAGES)


def stage_rules(name: str) -> frozenset[str]:
    """The rule slugs of one stage by its name (empty for an unknown stage)."""
    return frozenset(next((rules for stage, rules in TRIAGE_STAGES if stage == name), ()))


# Training-quality findings: what the verdict's "Training:" line is chosen from.
TRAINING_QUALITY = stage_rules("training quality")


def stage_name(rule: str) -> str | None:
    for name, rules in TRIAGE_STAGES:
        if rule in rules:
            return name
    return None
