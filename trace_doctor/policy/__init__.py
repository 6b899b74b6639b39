"""Every threshold, typed, in one place: the shared knobs and one frozen dataclass per rule.

A user's `[tool.trace-doctor.shared]`, `[tool.trace-doctor.rules.<slug>]` and `[tool.trace-doctor.watch]`
(the live watch's stall bound, policy/live.py) tables become one `Policy` when settings load; values
are checked (type and range) there, so a bad value is a configuration error naming the key. Rules
read their own thresholds (`ctx.thresholds`), derive/ receives shared knobs as parameters, renderers
read what the analysis used (`Analysis.policy`).

    >>> policy = Policy.from_config(rules={"get-batch-bottleneck": {"min_share": 0.3}})
    >>> policy.rule("get-batch-bottleneck").min_share
    0.3
    >>> try:
    ...     Policy.from_config(rules={"get-batch-bottleneck": {"min_share": "abc"}})
    ... except PolicyError as error:
    ...     print(error)
    [tool.trace-doctor.rules.get-batch-bottleneck] `min_share` must be a number, not 'abc'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from trace_doctor.did_you_mean import did_you_mean
from trace_doctor.policy.live import WatchPolicy
from trace_doctor.policy.schema import PolicyError, ThresholdInfo, build, describe
from trace_doctor.policy.shared import SharedPolicy

__all__ = ["Policy", "PolicyError", "SharedPolicy", "ThresholdInfo", "WatchPolicy", "describe", "rule_policies"]


def rule_policies() -> Mapping[str, type]:
    """slug -> its thresholds' class, as each rule declares it (`Rule(policy=...)`, rules/checks/).
    The rule modules import this package, so the registry is read when a policy is built, not on import."""
    from trace_doctor.rules.catalogue import policy_classes

    return MappingProxyType(policy_classes())


# Where shared knobs used to be set, in round 1's configuration: still honoured, as the shared knob.
MOVED_TO_SHARED: Mapping[tuple[str, str], str] = MappingProxyType(
    {
        ("pipelining-gap", "clock_cycle_s"): "clock_cycle_s",
        ("warmup-slowness", "max_warmup_share"): "max_warmup_share",
        ("kl-drift", "max_kl"): "max_stable_kl",
        ("renderer-kl-step0", "max_kl_v1"): "max_stable_kl",
        ("renderer-kl-step0", "max_kl_v2"): "max_stable_kl",
        ("gil-stall", "round_trip_stretch_ratio"): "round_trip_stretch_ratio",
        ("pipelining-gap", "min_wait_s"): "fb_optim_handoff_s",
    }
)


def _rules_where(slug: str) -> str:
    return f"[tool.trace-doctor.rules.{slug}]"


SHARED_WHERE = "[tool.trace-doctor.shared]"
WATCH_WHERE = "[tool.trace-doctor.watch]"


@dataclass(frozen=True)
class Policy:
    """The thresholds an analysis runs with: shared knobs plus every rule's policy instance."""

    shared: SharedPolicy = field(default_factory=SharedPolicy)
    # slug -> that rule's thresholds where the configuration set any (a plain dict: a Policy is pickled
    # to the worker processes that analyse a fleet's runs).
    rules: Mapping[str, Any] = field(default_factory=dict)
    # Settings that were honoured at an old location, as sentences for the user.
    notes: tuple[str, ...] = ()
    # `trace-doctor watch`'s stall bound and findings cadence: no rule reads them.
    watch: WatchPolicy = field(default_factory=WatchPolicy)

    def rule(self, slug: str) -> Any:
        """The thresholds of rule `slug` (its defaults unless the configuration overrode them)."""
        found = self.rules.get(slug)
        if found is not None:
            return found
        classes = rule_policies()
        if slug not in classes:
            raise PolicyError(f"no rule `{slug}`")
        return classes[slug]()

    @classmethod
    def from_config(
        cls,
        *,
        rules: Mapping[str, Mapping[str, Any]] | None = None,
        shared: Mapping[str, Any] | None = None,
        watch: Mapping[str, Any] | None = None,
        source: str | None = None,
    ) -> Policy:
        """A checked Policy from configuration tables; PolicyError names the file, table and key at fault."""
        prefix = f"{source}: " if source else ""
        shared_values = dict(shared or {})
        moved_from: dict[str, str] = {}
        notes: list[str] = []
        per_rule: dict[str, Any] = {}
        classes = rule_policies()
        for slug, values in (rules or {}).items():
            if slug not in classes:
                hint = did_you_mean(str(slug), classes)
                raise PolicyError(f"{prefix}configuration names unknown rule `{slug}`{hint} (see `trace-doctor rules`)")
            if not isinstance(values, Mapping):
                raise PolicyError(f"{prefix}{_rules_where(slug)} must be a table of thresholds")
            own = {}
            for key, value in values.items():
                knob = MOVED_TO_SHARED.get((slug, key))
                if knob is None:
                    own[key] = value
                    continue
                old = f"{_rules_where(slug)} {key}"
                if knob in shared_values and shared_values[knob] != value:
                    earlier = moved_from.get(knob, f"{SHARED_WHERE} {knob}")
                    raise PolicyError(f"{prefix}{old} = {value!r} contradicts {earlier} = {shared_values[knob]!r}")
                shared_values[knob] = value
                moved_from.setdefault(knob, old)
                notes.append(f"{old} sets the shared knob {SHARED_WHERE} {knob} (used by several rules and charts)")
            per_rule[slug] = build(classes[slug], own, f"{prefix}{_rules_where(slug)}")
        shared_policy = SharedPolicy()
        if shared_values:
            where = prefix + SHARED_WHERE
            try:
                shared_policy = build(SharedPolicy, shared_values, where)
            except PolicyError as exc:
                # Name the key where the user wrote it when it came from an old location.
                for knob, old in moved_from.items():
                    exc = PolicyError(str(exc).replace(f"{where} `{knob}`", f"{prefix}{old}"))
                raise exc from None
        watch_policy = build(WatchPolicy, dict(watch), prefix + WATCH_WHERE) if watch else WatchPolicy()
        return cls(shared=shared_policy, rules=per_rule, notes=tuple(notes), watch=watch_policy)

    def thresholds(self, slug: str) -> list[ThresholdInfo]:
        """Rule `slug`'s thresholds as `trace-doctor rules SLUG` prints them."""
        return describe(self.rule(slug))
