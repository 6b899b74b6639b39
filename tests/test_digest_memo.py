"""An input whose identity and times are those recorded with its hash is not hashed again; any
write, a hash taken too soon after one, or a damaged memo means hashing it whole."""

from __future__ import annotations

import os

import pytest

from trace_doctor.ingest.storage import cache, digest_memo


@pytest.fixture
def root(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("TRACE_DOCTOR_CACHE_DIR", str(folder))
    monkeypatch.delenv("TRACE_DOCTOR_CACHE", raising=False)
    monkeypatch.setattr(cache, "_unwritable", None)
    digest_memo.forget()
    yield folder
    digest_memo.forget()


def counting(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = cache.file_digest

    def file_digest(path, size):
        calls.append(size)
        return real(path, size)

    monkeypatch.setattr(cache, "file_digest", file_digest)
    return calls


def test_a_settled_file_is_hashed_once_even_across_processes(root, tmp_path, monkeypatch):
    path = tmp_path / "trace_events.jsonl"
    path.write_bytes(b'{"a": 1}\n' * 1000)
    # As if the file had last changed long before it was hashed (a finished run's inputs).
    monkeypatch.setattr(digest_memo, "RACY_SECONDS", -1e12)
    calls = counting(monkeypatch)
    first = cache.snapshot(path, min_bytes=0)
    digest_memo.forget()  # another process: the memo is read back from the cache folder
    second = cache.snapshot(path, min_bytes=0)
    assert first == second and len(calls) == 1
    assert (root / digest_memo.MEMO_NAME).exists()


def test_any_write_or_a_recent_change_means_hashing_again(root, tmp_path, monkeypatch):
    path = tmp_path / "trace_events.jsonl"
    path.write_bytes(b'{"a": 1}\n' * 1000)
    calls = counting(monkeypatch)
    # Written just now: a write in the same clock tick would keep its times, so never trusted.
    cache.snapshot(path, min_bytes=0)
    cache.snapshot(path, min_bytes=0)
    assert len(calls) == 2
    monkeypatch.setattr(digest_memo, "RACY_SECONDS", -1e12)
    before = os.stat(path)
    settled = cache.snapshot(path, min_bytes=0)
    assert len(calls) == 2  # trusted now: remembered, not hashed
    path.write_bytes(b'{"a": 2}\n' * 1000)  # same size; the times are put back as they were
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    edited = cache.snapshot(path, min_bytes=0)
    assert len(calls) == 3 and settled is not None and edited is not None and edited.digest != settled.digest


@pytest.mark.parametrize("memo", [b"", b"not json", b"[]", b'{"1:2": "x"}', b'{"1:2": [1, 2, 3, 4, "late"]}'])
def test_a_damaged_memo_is_ignored(root, tmp_path, monkeypatch, memo):
    root.mkdir(parents=True)
    (root / digest_memo.MEMO_NAME).write_bytes(memo)
    path = tmp_path / "trace_events.jsonl"
    path.write_bytes(b'{"a": 1}\n' * 10)
    monkeypatch.setattr(digest_memo, "RACY_SECONDS", -1e12)
    calls = counting(monkeypatch)
    taken = cache.snapshot(path, min_bytes=0)
    assert taken is not None and len(calls) == 1
