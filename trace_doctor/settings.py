"""User configuration: `[tool.trace-doctor]` in pyproject.toml or a trace-doctor.toml, found
from the working directory upward. Command-line options win over the file."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trace_doctor.rules.policy import PolicyError, validate_overrides

FAIL_ON_LEVELS = ("never", "info", "warning", "error")


@dataclass
class Settings:
    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    fail_on: str = "never"
    fail_on_inconclusive: bool = False
    rules: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str | None = None


def _as_list(value: Any, key: str, source: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise PolicyError(f"{source}: `{key}` must be a list of rule slugs")


def _section(path: Path) -> dict[str, Any] | None:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
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
            except tomllib.TOMLDecodeError:
                continue
    return None


def load_settings(explicit: str | None = None) -> Settings:
    """Settings from --config FILE, else the nearest config file, else defaults."""
    path = Path(explicit) if explicit else find_config()
    if path is None:
        return Settings()
    try:
        section = _section(path) or {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise PolicyError(f"cannot read configuration {path}: {exc}") from exc
    source = str(path)
    settings = Settings(source=source)
    settings.select = _as_list(section.get("select"), "select", source)
    settings.ignore = _as_list(section.get("ignore"), "ignore", source)
    fail_on = section.get("fail-on", section.get("fail_on", "never"))
    if fail_on not in FAIL_ON_LEVELS:
        raise PolicyError(f"{source}: fail-on must be one of {', '.join(FAIL_ON_LEVELS)}, not {fail_on!r}")
    settings.fail_on = fail_on
    settings.fail_on_inconclusive = bool(section.get("fail-on-inconclusive", False))
    rules = section.get("rules", {})
    if not isinstance(rules, dict) or not all(isinstance(v, dict) for v in rules.values()):
        raise PolicyError(f"{source}: [tool.trace-doctor.rules.<slug>] tables expected")
    validate_overrides(rules)
    settings.rules = rules
    return settings
