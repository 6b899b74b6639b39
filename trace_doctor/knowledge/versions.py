"""Dependency versions known to stall runs or corrupt tokens (FORMATS.md section 7).

Each record says which versions are bad as a PEP 440 specifier (for people) and a predicate (for
code: some conditions, like "any pre-release", are not expressible as a specifier), why, and the
fix. Runs record versions nowhere explicit, so the log parser harvests them from text
(`pydantic: 2.13.0b2`, pip-freeze lines, site-packages paths) and rules check them here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from trace_doctor.model import Severity


@dataclass(frozen=True)
class KnownBadVersion:
    """A package whose versions matching `specifier` are known to cause a problem."""

    id: str
    package: str  # canonical distribution name; "python" for the interpreter
    specifier: str  # what a person reads, e.g. ">=2.13.0b1,<2.13.0" or "any pre-release"
    applies: Callable[[Version], bool]
    why: str
    fix: str
    severity: Severity = "warning"
    # "vl": the problem exists only for vision-language models; "startup": it stops a run before its
    # first step (an import that fails), so a run that trained shows it did not bite; "any": every run.
    scope: str = "any"
    # Not broken, only older than the cookbook now requires: "upgrade available", not "known-bad".
    outdated: bool = False
    # For a "startup" record: a regex of the error the failure prints (its presence in the logs
    # means the failure did stop a launch, even if a later launch trained).
    failure_text: str = ""

    def matches(self, package: str, version: str) -> bool:
        """Whether `package==version` is one of the bad versions (unparseable versions never match)."""
        parsed = parse_version(version)
        return parsed is not None and canonicalize_name(package) == self.package and self.applies(parsed)


@dataclass(frozen=True)
class KnownBadCombination:
    """Versions that are fine alone and break together."""

    id: str
    requirements: Mapping[str, str]  # package -> specifier, all must hold
    why: str
    fix: str
    severity: Severity = "warning"

    def matches(self, versions: Mapping[str, str]) -> bool:
        """Whether every package of the combination is present in `versions` within its specifier."""
        canonical = {canonicalize_name(k): v for k, v in versions.items()}
        for package, spec in self.requirements.items():
            parsed = parse_version(canonical.get(package, ""))
            if parsed is None or not SpecifierSet(spec).contains(parsed, prereleases=True):
                return False
        return True


def parse_version(text: str) -> Version | None:
    """A PEP 440 version, or None for text that is not one (local builds like `2.4.0+cu121` parse)."""
    try:
        return Version(text.strip())
    except InvalidVersion:
        return None


def _in(spec: str) -> Callable[[Version], bool]:
    specifier = SpecifierSet(spec)
    return lambda version: specifier.contains(version, prereleases=True)


def _between(low: str, high: str) -> Callable[[Version], bool]:
    # Plain comparison, not a SpecifierSet: PEP 440 makes `<2.13.0` exclude 2.13.0 pre-releases,
    # which are exactly the versions meant here.
    return lambda version: Version(low) <= version < Version(high)


# Dependencies whose pre-releases sit on the training hot path (serialization, tokenization, SDK).
CORE_PACKAGES = (
    "pydantic",
    "pydantic-core",
    "tinker",
    "tinker-cookbook",
    "transformers",
    "torch",
    "numpy",
    "tokenizers",
)

KNOWN_BAD_VERSIONS: tuple[KnownBadVersion, ...] = (
    KnownBadVersion(
        "pydantic-2.13-beta",
        "pydantic",
        ">=2.13.0b1,<2.13.0",
        _between("2.13.0b1", "2.13.0"),
        "pydantic 2.13 betas make model_dump() of large payloads take minutes: the SDK thread stalls while serializing",
        "pin pydantic<2.13 or use a stable release",
        "error",
    ),
    KnownBadVersion(
        "transformers-5.3.0",
        "transformers",
        "==5.3.0",
        _in("==5.3.0"),
        "transformers 5.3.0 loads DeepSeek V2/V3 tokenizers with the wrong tokenizer_class "
        "(huggingface/transformers#44801)",
        "use transformers>=5.3.1",
    ),
    KnownBadVersion(
        "transformers-kimi-regression",
        "transformers",
        "==5.4.*, >=5.5.0,<=5.5.3, ==5.6.*",
        lambda v: _in("==5.4.*")(v) or _in(">=5.5.0,<=5.5.3")(v) or _in("==5.6.*")(v),
        "the cookbook excludes these releases for a Kimi tokenizer regression (tinker-cookbook#783)",
        "use a transformers version the cookbook allows, e.g. 5.5.4",
    ),
    KnownBadVersion(
        "transformers-pre-5-vl",
        "transformers",
        "<5.0",
        _in("<5.0"),
        "before 5.0 Qwen2VLImageProcessor miscounts image tokens (`Expected X tokens, got Y from image`) "
        "for vision-language models",
        "use transformers>=5.0 or install torchvision",
        "info",
        scope="vl",
    ),
    KnownBadVersion(
        "litellm-compromised",
        "litellm",
        "==1.82.7, ==1.82.8",
        lambda v: _in("==1.82.7")(v) or _in("==1.82.8")(v),
        "litellm 1.82.7 and 1.82.8 were compromised releases",
        "uninstall them now; use 1.105.1 or another clean release",
        "error",
    ),
    KnownBadVersion(
        "python-3.14",
        "python",
        ">=3.14",
        _in(">=3.14"),
        "Python 3.14 removed pkg_resources, which some tokenizer and dataset dependencies still import",
        "use Python 3.11-3.13 or update the package that imports pkg_resources",
        scope="startup",
        failure_text=r"No module named '?pkg_resources",
    ),
    KnownBadVersion(
        "python-too-old",
        "python",
        "<3.11",
        _in("<3.11"),
        "the cookbook requires Python 3.11 or newer",
        "use Python 3.11 or newer",
        "error",
    ),
    # tinker SDK git history: 0.3.0 (2025-11-11, 604e00c) is the first release that opens a server session
    # (create_session + heartbeat); older SDKs send none, and the service rejects them with `session_id is
    # required. The version of the Tinker SDK you are using is no longer supported.` (FORMATS.md 6). The
    # cookbook pinned tinker>=0.3.0 the same day (6d9311b3).
    KnownBadVersion(
        "tinker-no-session",
        "tinker",
        "<0.3.0",
        _in("<0.3.0"),
        "SDKs before 0.3.0 open no server session, and the service rejects them (`session_id is required. "
        "The version of the Tinker SDK you are using is no longer supported.`)",
        "pip install --upgrade tinker",
        "error",
    ),
    # Cookbook pins since then: >=0.6.1 (2025-12-01), >=0.9.0 (2026-01-27), >=0.20.0, >=0.22.3, and
    # >=0.23.0 at HEAD (2a7427c2, 2026-08-04); 0.6.1 on PyPI requires >=0.38. An SDK the cookbook of
    # its day accepted still works: the debug skill only says to check for the latest stable SDK.
    KnownBadVersion(
        "tinker-upgrade-available",
        "tinker",
        ">=0.3.0,<0.23.0",
        _in(">=0.3.0,<0.23.0"),
        "older than the current cookbook's pin tinker>=0.23.0 (0.6.1 on PyPI pins >=0.38); it works with the "
        "cookbook release of its time, but fixes and newer SDK features are missing",
        "pip install --upgrade tinker (together with a matching tinker-cookbook)",
        "info",
        outdated=True,
    ),
    KnownBadVersion(
        "torch-too-old", "torch", "<2.10", _in("<2.10"), "the cookbook requires torch>=2.10", "upgrade torch", "info"
    ),
    *(
        KnownBadVersion(
            f"{package}-pre-release",
            package,
            "any pre-release",
            lambda v: v.is_prerelease,
            f"a pre-release of {package}, a dependency on the training hot path, is untested by the cookbook",
            f"use a stable {package} release",
        )
        for package in CORE_PACKAGES
    ),
)

KNOWN_BAD_COMBINATIONS: tuple[KnownBadCombination, ...] = (
    KnownBadCombination(
        "cookbook-0.5-tinker-0.38-py311",
        {"tinker-cookbook": "<0.6", "tinker": ">=0.38", "python": ">=3.11,<3.12"},
        "tinker 0.38 wraps every *_async method in @deprecated; on Python 3.11 inspect.iscoroutinefunction no "
        "longer sees them, so cookbook <=0.5.x records SDK spans as near-zero sync spans",
        "upgrade tinker-cookbook to 0.6.1+, or use Python 3.12+",
    ),
)


def bad_versions(package: str, version: str) -> list[KnownBadVersion]:
    """Every known-bad record that `package==version` matches, most specific first."""
    return [record for record in KNOWN_BAD_VERSIONS if record.matches(package, version)]


def bad_combinations(versions: Mapping[str, str]) -> list[KnownBadCombination]:
    """Every known-bad combination fully present in a {package: version} mapping."""
    return [combo for combo in KNOWN_BAD_COMBINATIONS if combo.matches(versions)]
