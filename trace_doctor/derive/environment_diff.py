"""Two runs' training environments side by side: which versions, Python and machine facts differ.

The debug guide's "works on one machine, not the other" question starts from Step 1's environment
check (`Python:`, `tinker SDK:`, `pydantic:` ... lines, FORMATS.md 5.5) and a `pip freeze`: what one
machine has that the other does not. A run's environment is read from what the run recorded
(derive/training_machine.py: version lines, a pip-freeze `requirements.txt`, W&B's
`wandb-metadata.json`, the cookbook commit in `code.diff`), never from the analysing machine.

`run_environment` reduces one run to a small JSON-ready dict (the fleet carries it across
processes); `compare_environments` lists the differences, the ones most likely to matter first:
a version known to be bad (knowledge/versions.py), the SDK, Python, the other packages on the
training hot path, the cookbook commit, the machine, then every other package. It also says which
side lacks a record of an aspect the other has, and what to capture so the next run has it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from packaging.utils import canonicalize_name

from trace_doctor.derive.training_machine import COMMIT_PACKAGE_PREFIX, FREEZE_EVIDENCE, recorded_versions
from trace_doctor.knowledge.versions import CORE_PACKAGES, bad_versions
from trace_doctor.model import RunTables

SDK_PACKAGES = ("tinker", "tinker-cookbook")
# Machine facts W&B records, in the order they most often explain a difference in behaviour: the
# CPU count bounds the data loading and tokenization threads, the GPU/CUDA only local work, the OS
# and host kind the libraries' builds, the host name only which box it was.
MACHINE_FIELDS = ("cpu_count", "cpu_count_logical", "gpu", "gpu_count", "cuda_version", "os", "host_kind", "host")
# Clouds a kernel release names (`Linux-6.8.0-1015-aws-x86_64`): the host kind, beside the OS family.
CLOUD_KERNELS = re.compile(r"-(aws|gcp|azure|oracle|ibm)\b", re.IGNORECASE)

# What to capture so a run records each aspect (the debug guide's Step 1 environment check).
CAPTURE = {
    "packages": "`pip freeze > requirements.txt` in the run's log folder (W&B saves one too)",
    "python": "`python -V` (or the environment check's `Python: {sys.version}` line) in the run's log",
    "machine": "W&B's wandb-metadata.json (run with W&B on), or `nproc`, `nvidia-smi -L` and `uname -a` in the log",
    "cookbook": "the cookbook's commit (`git -C tinker-cookbook rev-parse HEAD`; the cookbook writes it to code.diff)",
}
ASPECTS = tuple(CAPTURE)

# Rank of a difference: lower is named first.
RANK_KNOWN_BAD, RANK_SDK, RANK_PYTHON, RANK_CORE, RANK_COOKBOOK, RANK_MACHINE, RANK_OTHER = range(7)


def _python_version(text: str | None) -> str | None:
    """`3.12.11` from `CPython 3.12.11` or `3.14.0 (main, ...) [GCC ...]`; None for no version."""
    if not text:
        return None
    match = re.search(r"\d+\.\d+(?:\.\d+)?\S*", text)
    return match.group(0) if match else None


def _host_kind(os_text: str | None) -> str | None:
    """The OS family and, when the kernel names one, the cloud: `Linux (aws)`, `macOS`."""
    if not os_text:
        return None
    family = os_text.split("-", 1)[0]
    cloud = CLOUD_KERNELS.search(os_text)
    return f"{family} ({cloud.group(1).lower()})" if cloud else family


def run_environment(run: RunTables) -> dict[str, Any]:
    """What the run recorded about its environment: {packages, complete, python, machine, cookbook}.

    `packages` maps each canonical package name to its version; an explicit version line (the
    environment check) wins over a pip-freeze line of the same package, since the user printed it
    from the process that trained. `complete` is true when a pip freeze lists the whole environment,
    so a package it lacks was not installed. Aspects the run does not record are None (empty for
    packages)."""
    packages: dict[str, str] = {}
    explicit: set[str] = set()
    complete = False
    python = None
    cookbook = None
    for record in recorded_versions(run):
        name, version = record["package"], record["version"]
        if name.startswith(COMMIT_PACKAGE_PREFIX):
            cookbook = cookbook or version
            continue
        name = canonicalize_name(name)
        if name == "python":
            python = python or _python_version(version)
            continue
        from_freeze = record["evidence"] == FREEZE_EVIDENCE
        complete = complete or from_freeze
        if name in explicit or (from_freeze and name in packages):
            continue
        packages[name] = version
        if not from_freeze:
            explicit.add(name)
    machine: dict[str, Any] = {}
    for wandb in run.meta.wandb:
        python = python or _python_version(wandb.python)
        cookbook = cookbook or wandb.git_commit
        facts = {
            "cpu_count": wandb.cpu_count,
            "cpu_count_logical": wandb.cpu_count_logical,
            "gpu": wandb.gpu,
            "gpu_count": wandb.gpu_count,
            "cuda_version": wandb.cuda_version,
            "os": wandb.os,
            "host_kind": _host_kind(wandb.os),
            "host": wandb.host,
        }
        for key, value in facts.items():
            if value is not None and key not in machine:
                machine[key] = value
    return {
        "packages": dict(sorted(packages.items())),
        "complete": complete,
        "python": python,
        "machine": machine,
        "cookbook": cookbook,
    }


def recorded_aspects(environment: dict[str, Any]) -> list[str]:
    """The aspects (packages, python, machine, cookbook) an environment records."""
    return [aspect for aspect in ASPECTS if environment.get(aspect)]


def _rank(aspect: str, name: str, known_bad: list[str]) -> int:
    if known_bad:
        return RANK_KNOWN_BAD
    if aspect == "packages":
        if name in SDK_PACKAGES:
            return RANK_SDK
        return RANK_CORE if name in CORE_PACKAGES else RANK_OTHER
    return {"python": RANK_PYTHON, "cookbook": RANK_COOKBOOK}.get(aspect, RANK_MACHINE)


def _known_bad(package: str, *versions: Any) -> list[str]:
    """Ids of the known-bad records (not the merely outdated ones) either version matches."""
    return sorted(
        {
            record.id
            for version in versions
            if isinstance(version, str)
            for record in bad_versions(package, version)
            if not record.outdated
        }
    )


@dataclass
class EnvironmentDiff:
    """The differences between a baseline's and a candidate's environments, most likely to matter first.

    Each difference: {aspect, name, baseline, candidate, known_bad}; a version None means the side's
    complete pip freeze lists no such package. `missing`: {side, aspect, capture} for an aspect only
    one side records; `compared`: the aspects both record."""

    differences: list[dict[str, Any]] = field(default_factory=list)
    missing: list[dict[str, str]] = field(default_factory=list)
    compared: list[str] = field(default_factory=list)
    same_packages: int = 0

    @property
    def differ(self) -> bool:
        return bool(self.differences)

    def to_dict(self) -> dict[str, Any]:
        return {
            "differences": self.differences,
            "missing": self.missing,
            "compared": self.compared,
            "same_packages": self.same_packages,
        }


def _name(difference: dict[str, Any]) -> str:
    return {"python": "Python", "cookbook": "cookbook commit"}.get(difference["aspect"], difference["name"])


def _shown(aspect: str, value: Any) -> str:
    if value is None:
        return "(not installed)" if aspect == "packages" else "(none)"
    return str(value)[:10] if aspect == "cookbook" else str(value)


def _known_bad_note(difference: dict[str, Any]) -> str:
    return f" (known bad: {', '.join(difference['known_bad'])})" if difference["known_bad"] else ""


def describe_difference(difference: dict[str, Any]) -> str:
    """`tinker 0.40.1 -> 0.41.0`, `Python 3.12.11 -> 3.13.1`, `gpu A100 -> (none)`, with known-bad ids."""
    aspect = difference["aspect"]
    text = f"{_name(difference)} {_shown(aspect, difference['baseline'])} -> {_shown(aspect, difference['candidate'])}"
    return text + _known_bad_note(difference)


def describe_group_difference(entry: dict[str, Any]) -> str:
    """`tinker 0.41.0 in failing runs (1), 0.40.1 in healthy runs (2)`: a `compare_groups` entry in words."""

    def side(values: list[dict[str, Any]]) -> str:
        return ", ".join(f"{_shown(entry['aspect'], v['value'])} ({len(v['runs'])})" for v in values)

    return (
        f"{_name(entry)} {side(entry['failing'])} in failing runs, {side(entry['healthy'])} in healthy runs"
        + _known_bad_note(entry)
    )


def _difference(aspect: str, name: str, before: Any, after: Any, package: str | None = None) -> dict[str, Any]:
    known = _known_bad(package, before, after) if package else []
    return {
        "aspect": aspect,
        "name": name,
        "baseline": before,
        "candidate": after,
        "known_bad": known,
        "rank": _rank(aspect, name, known),
    }


def compare_environments(baseline: dict[str, Any], candidate: dict[str, Any]) -> EnvironmentDiff:
    """What differs between two `run_environment` records, over the aspects both record."""
    result = EnvironmentDiff()
    base_has, cand_has = set(recorded_aspects(baseline)), set(recorded_aspects(candidate))
    for aspect in ASPECTS:
        if (aspect in base_has) != (aspect in cand_has):
            side = "baseline" if aspect in cand_has else "candidate"
            result.missing.append({"side": side, "aspect": aspect, "capture": CAPTURE[aspect]})
    result.compared = [aspect for aspect in ASPECTS if aspect in base_has and aspect in cand_has]
    found: list[dict[str, Any]] = []
    if "packages" in result.compared:
        before, after = baseline["packages"], candidate["packages"]
        for name in sorted(set(before) | set(after)):
            if name in before and name in after:
                if before[name] == after[name]:
                    result.same_packages += 1
                else:
                    found.append(_difference("packages", name, before[name], after[name], name))
            elif (name in before and candidate.get("complete")) or (name in after and baseline.get("complete")):
                # A complete freeze without the package: it was not installed there.
                found.append(_difference("packages", name, before.get(name), after.get(name), name))
    if "python" in result.compared and baseline["python"] != candidate["python"]:
        found.append(_difference("python", "python", baseline["python"], candidate["python"], "python"))
    if "cookbook" in result.compared and baseline["cookbook"] != candidate["cookbook"]:
        found.append(_difference("cookbook", "cookbook", baseline["cookbook"], candidate["cookbook"]))
    if "machine" in result.compared:
        before, after = baseline["machine"], candidate["machine"]
        for key in MACHINE_FIELDS:
            if key in before and key in after and before[key] != after[key]:
                found.append(_difference("machine", key, before[key], after[key]))
    result.differences = sorted(found, key=lambda d: d["rank"])  # stable: names in order within a rank
    return result


def _facts(environment: dict[str, Any]) -> dict[tuple[str, str], Any]:
    """(aspect, name) -> value for every fact an environment records."""
    facts: dict[tuple[str, str], Any] = {("packages", k): v for k, v in environment.get("packages", {}).items()}
    for aspect in ("python", "cookbook"):
        if environment.get(aspect):
            facts[(aspect, aspect)] = environment[aspect]
    facts.update({("machine", k): v for k, v in environment.get("machine", {}).items()})
    return facts


def compare_groups(healthy: dict[str, dict[str, Any]], failing: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The facts where a failing run has a value no healthy run has.

    `healthy` / `failing`: run label -> `run_environment`. A fact is compared where at least one run of
    each group records it (a run with a complete pip freeze that lacks a package records it as not
    installed). Each entry: {aspect, name, healthy: [{value, runs}], failing: [{value, runs}],
    known_bad}, the ones most likely to matter first."""

    def values(group: dict[str, dict[str, Any]], key: tuple[str, str]) -> list[dict[str, Any]]:
        by_value: dict[Any, list[str]] = {}
        for label, environment in sorted(group.items()):
            facts = _facts(environment)
            if key in facts:
                by_value.setdefault(facts[key], []).append(label)
            elif key[0] == "packages" and environment.get("complete"):
                by_value.setdefault(None, []).append(label)
        return [{"value": value, "runs": runs} for value, runs in by_value.items()]

    keys = sorted({key for group in (healthy, failing) for env in group.values() for key in _facts(env)})
    found = []
    for aspect, name in keys:
        good, bad = values(healthy, (aspect, name)), values(failing, (aspect, name))
        # A value some failing run has and no healthy run has: a value the healthy runs share with the
        # failing ones cannot be what tells them apart.
        if not good or not bad or not {v["value"] for v in bad} - {v["value"] for v in good}:
            continue
        seen = [v["value"] for v in (*good, *bad)]
        known = _known_bad(name, *seen) if aspect in ("packages", "python") else []
        found.append(
            {
                "aspect": aspect,
                "name": name,
                "healthy": good,
                "failing": bad,
                "known_bad": known,
                "rank": _rank(aspect, name, known),
            }
        )
    return sorted(found, key=lambda d: d["rank"])
