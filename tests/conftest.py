"""Shared test paths: the committed fixtures and the real corpus (read in place, never copied)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_RUNS = ROOT / "fixtures" / "runs"
CORPUS = ROOT.parent / "shared" / "corpus"
CORPUS_MISSING = "the real-run corpus ../shared/corpus is not present on this machine (CI has it)"


@pytest.fixture(scope="session", autouse=True)
def _pipe_width_terminal():
    """Every test renders at the width of a pipe, whatever runs pytest: an 80-column terminal, or
    pytest-xdist's workers (which say COLUMNS=80), would otherwise rewrap the text tests read back."""
    from trace_doctor.report.console import WIDTH

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("COLUMNS", str(WIDTH))
        yield


def corpus_path(relative: str) -> Path:
    path = CORPUS / relative
    if not path.exists():
        pytest.skip(CORPUS_MISSING)
    return path


def corpus_metrics_files() -> list[Path]:
    if not CORPUS.exists():
        return []
    return sorted(p for p in CORPUS.rglob("*.jsonl") if "metrics" in p.name)


def fixture_run(name: str) -> Path:
    path = FIXTURE_RUNS / name
    if not path.exists():
        pytest.skip(f"fixture run {name} has not been generated (make fixtures)")
    return path


def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder of the test's own, on whatever the environment said, with the cache's
    per-process state (an unwritable folder seen, notes) reset; returns the folder."""
    from trace_doctor.ingest.storage import cache

    root = tmp_path / "cache"
    monkeypatch.setenv("TRACE_DOCTOR_CACHE_DIR", str(root))
    monkeypatch.delenv("TRACE_DOCTOR_CACHE", raising=False)
    monkeypatch.delenv("TRACE_DOCTOR_CACHE_MAX_MB", raising=False)
    monkeypatch.setattr(cache, "_unwritable", None)
    cache.take_notes()
    return root
