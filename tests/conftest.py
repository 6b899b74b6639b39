"""Shared test paths: the committed fixtures and the real corpus (read in place, never copied)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_RUNS = ROOT / "fixtures" / "runs"
CORPUS = ROOT.parent / "shared" / "corpus"
CORPUS_MISSING = "the real-run corpus ../shared/corpus is not present on this machine (CI has it)"


@pytest.fixture(scope="session", autouse=True)
def _temporary_files_are_removed():
    """Every test session (each xdist worker its own) gets a TMPDIR of its own, the commands it runs
    in-process and in child processes included; at the end, once the tables still referenced are
    collected, no `trace-doctor-*` scratch folder may be left in it. A leftover is a failure, with
    the folders and what they hold: the tool must remove its temporary files on every exit path."""
    import gc
    import os
    import shutil
    import tempfile

    from trace_doctor.ingest.storage import stored_table

    session_tmp = Path(tempfile.mkdtemp(prefix="td-tests-"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(session_tmp))
        patch.setattr(tempfile, "tempdir", str(session_tmp))
        yield
        gc.collect()
        stored_table.release_scratch()
        in_use = stored_table.paths_in_use()
        left = {}
        for folder in sorted(session_tmp.glob("trace-doctor-*")):
            found = sorted(folder.rglob("*"))
            # Files a table still alive reads (a module-level cache of a loaded run) are not left over yet.
            empty = [p for p in found if p.is_dir() and not any(p.iterdir())]
            if not found or empty or any(p.is_file() and str(p) not in in_use for p in found):
                left[folder.name] = [os.path.relpath(p, folder) + ("/" if p.is_dir() else "") for p in found]
        shutil.rmtree(session_tmp, ignore_errors=True)
    if left:
        listing = "; ".join(f"{name}: {files[:5]}" for name, files in list(left.items())[:10])
        pytest.fail(f"{len(left)} trace-doctor scratch folder(s) left in TMPDIR by the tests: {listing}", pytrace=False)


@pytest.fixture(autouse=True)
def _disk_writable_and_nothing_kept(monkeypatch):
    """Each test starts as a fresh process would: the scratch disk usable (a test of a full disk leaves the
    process keeping tables in memory, storage/stored_table.disk_failed) and no part's results kept from an
    earlier test (storage/part_memo). Without it, a test meant to store a table on disk would hold it in
    memory, or read another test's results, depending on which tests its xdist worker ran before."""
    from trace_doctor.ingest.storage import part_memo, stored_table

    monkeypatch.setattr(stored_table, "_disk_ok", True)
    part_memo.KEPT.clear()
    part_memo.SMALL_ROWS.clear()
    yield


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


# The headless Chromium the report tests drive (test_report_browser*.py skip themselves without it).
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def chromium():
    """One browser per test file: launching it costs a second or two."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield instance
        instance.close()


@pytest.fixture
def browser(chromium):
    """The file's browser, with every page a test opened closed after it: left open, each report's plotly
    stays live in the one browser (dozens by a file's end), which slows every later test and the close."""
    yield chromium
    for context in chromium.contexts:
        context.close()
