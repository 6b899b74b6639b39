"""User configuration: `[tool.trace-doctor]` in pyproject.toml or a trace-doctor.toml, found from the
working directory upward. Command-line options win over the file.

Every command reads its settings here, once: `load_settings()` checks the whole file (rule slugs,
threshold types and ranges, gate level) and returns `Settings`, or raises PolicyError naming the key.
"""

from __future__ import annotations

import stat
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trace_doctor.policy import Policy, PolicyError

FAIL_ON_LEVELS = ("never", "info", "warning", "error")
# Keys of the [tool.trace-doctor] table; anything else is a typo that would silently do nothing.
KNOWN_KEYS = (
    "select",
    "ignore",
    "fail-on",
    "fail_on",
    "fail-on-inconclusive",
    "fail_on_inconclusive",
    "rules",
    "shared",
    "watch",
)


@dataclass(frozen=True)
class Settings:
    """What the user chose: rules to run, the CI gate, and the thresholds (a checked Policy)."""

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    fail_on: str = "never"
    fail_on_inconclusive: bool = False
    policy: Policy = field(default_factory=Policy)
    source: str | None = None

    def with_options(
        self,
        *,
        select: list[str] | tuple[str, ...] | None = None,
        ignore: list[str] | tuple[str, ...] | None = None,
        fail_on: str | None = None,
        fail_on_inconclusive: bool | None = None,
    ) -> Settings:
        """These settings with command-line options applied: an option given wins over the file."""
        if fail_on is not None and fail_on not in FAIL_ON_LEVELS:
            raise PolicyError(f"fail-on must be one of {', '.join(FAIL_ON_LEVELS)}, not {fail_on!r}")
        return replace(
            self,
            select=tuple(select) if select else self.select,
            ignore=tuple(ignore) if ignore else self.ignore,
            fail_on=fail_on or self.fail_on,
            fail_on_inconclusive=self.fail_on_inconclusive or bool(fail_on_inconclusive),
        )


def _as_list(value: Any, key: str, source: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise PolicyError(f"{source}: `{key}` must be a list of rule slugs")


# A configuration is a few hundred bytes; far more is not one (`--config /dev/zero` read forever).
MAX_CONFIG_BYTES = 1 << 20


def _section(path: Path) -> dict[str, Any] | None:
    # Opening a FIFO for reading waits for a writer, and a device can be endless: regular files only.
    if not stat.S_ISREG(path.stat().st_mode):
        raise OSError(f"{path} is not a regular file (FIFO, socket, device or folder)")
    with path.open("rb") as fh:
        raw = fh.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise OSError(f"{path} is larger than {MAX_CONFIG_BYTES >> 20} MiB: not a configuration file")
    data = tomllib.loads(raw.decode("utf-8"))
    if path.name == "pyproject.toml":
        return data.get("tool", {}).get("trace-doctor")
    return data.get("tool", {}).get("trace-doctor", data)


def find_config(start: Path | None = None) -> Path | None:
    """Nearest trace-doctor.toml, or pyproject.toml with a [tool.trace-doctor] table."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / "trace-doctor.toml"
        if candidate.is_file():
            return candidate
        candidate = directory / "pyproject.toml"
        if candidate.is_file():
            try:
                if _section(candidate) is not None:
                    return candidate
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                continue
    return None


def load_settings(explicit: str | None = None) -> Settings:
    """Settings from --config FILE, else the nearest config file, else defaults."""
    path = Path(explicit) if explicit else find_config()
    if path is None:
        return Settings()
    try:
        section = _section(path) or {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise PolicyError(f"cannot read configuration {path}: {exc}") from exc
    source = str(path)
    if not isinstance(section, dict):
        raise PolicyError(f"{source}: [tool.trace-doctor] must be a table")
    unknown = sorted(k for k in section if k not in KNOWN_KEYS)
    if unknown:
        raise PolicyError(f"{source}: unknown key(s) {', '.join(map(repr, unknown))} (known: {', '.join(KNOWN_KEYS)})")
    fail_on = section.get("fail-on", section.get("fail_on", "never"))
    if fail_on not in FAIL_ON_LEVELS:
        raise PolicyError(f"{source}: fail-on must be one of {', '.join(FAIL_ON_LEVELS)}, not {fail_on!r}")
    inconclusive = section.get("fail-on-inconclusive", section.get("fail_on_inconclusive", False))
    if not isinstance(inconclusive, bool):
        raise PolicyError(f"{source}: fail-on-inconclusive must be true or false, not {inconclusive!r}")
    rules = section.get("rules", {})
    shared = section.get("shared", {})
    if not isinstance(rules, dict) or not all(isinstance(v, dict) for v in rules.values()):
        raise PolicyError(f"{source}: [tool.trace-doctor.rules.<slug>] tables expected")
    if not isinstance(shared, dict):
        raise PolicyError(f"{source}: [tool.trace-doctor.shared] must be a table")
    watch = section.get("watch", {})
    if not isinstance(watch, dict):
        raise PolicyError(f"{source}: [tool.trace-doctor.watch] must be a table")
    return Settings(
        select=_as_list(section.get("select"), "select", source),
        ignore=_as_list(section.get("ignore"), "ignore", source),
        fail_on=fail_on,
        fail_on_inconclusive=inconclusive,
        policy=Policy.from_config(rules=rules, shared=shared, watch=watch, source=source),
        source=source,
    )
