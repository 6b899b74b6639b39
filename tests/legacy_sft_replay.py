"""A replay of the cookbook's legacy SFT loop (supervised/train.py, 2025-10-26 to 2026-03-17) against a
FIFO service, writing `time/*` exactly as its `timed()` helper did.

Pipelined, the loop runs submit_batch(k+1) then finish_batch(k), and step k's `time/total` runs from
the start of submit_batch(k) to the end of finish_batch(k); sequential (the loop before 2025-10-26),
each step is submitted and finished before the next. The replay also returns the true wall clock.
"""

from __future__ import annotations

import json
import random


def replay_rows(
    n: int,
    *,
    pipelined: bool,
    seed: int = 7,
    untimed_s: tuple[float, float] = (0.1, 0.2),
    get_batch_s: tuple[float, float] = (0.9, 1.8),
    save_every: int = 20,
    shortened_every: int = 0,
) -> tuple[list[dict], float]:
    """(metrics rows in the cookbook's key order, the true wall time in seconds). `untimed_s`: the
    range of a step's untimed client work (SDK submissions, loss computation); `shortened_every`:
    every such row's `time/total` is written 0.5 s short (a row no loop shape explains)."""
    rng = random.Random(seed)
    gb = [290.0] + [rng.uniform(*get_batch_s) for _ in range(n - 1)]  # first batch: dataset load
    service = [rng.uniform(2.5, 4.5) for _ in range(n)]
    untimed = [rng.uniform(*untimed_s) for _ in range(n)]
    t, done, rows = 0.0, 0.0, []
    starts: dict[int, float] = {}
    arrive: dict[int, float] = {}

    def submit(k):
        nonlocal t
        starts[k] = t
        t += gb[k] + untimed[k] / 2  # get_batch, then the untimed SDK submissions
        arrive[k] = t

    def finish(k):
        nonlocal t, done
        done = max(arrive[k], done) + service[k]
        save = None
        if save_every and k % save_every == 0 and k > 0:
            end = max(t, done) + 11.0
            save, t, done = end - t, end, end
        wait = max(done - t, 0.0)
        t += wait + untimed[k] / 2  # the result wait, then the loss computation
        row = {"step": k, "epoch": 0, "progress": (k + 1) / 12000, "learning_rate": 0.001, "time/get_batch": gb[k]}
        if save is not None:
            row["time/save_checkpoint"] = save
        row.update({"time/step": wait, "num_sequences": 32, "num_tokens": 316000, "num_loss_tokens": 305000})
        total = t - starts[k] - (0.5 if shortened_every and k % shortened_every == 1 else 0.0)
        row.update({"train_mean_nll": 1.7, "time/total": total})
        rows.append(row)
        t += 0.02  # writing the metrics row

    if pipelined:
        submit(0)
        for k in range(n):
            if k + 1 < n:
                submit(k + 1)
            finish(k)
    else:
        for k in range(n):
            submit(k)
            finish(k)
    return rows, t


def replay_text(n: int, **options) -> tuple[str, float]:
    """(metrics.jsonl text, `json.dumps` defaults as the cookbook writes it, the true wall time)."""
    rows, wall = replay_rows(n, **options)
    return "".join(json.dumps(r) + "\n" for r in rows), wall
