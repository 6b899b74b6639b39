"""Cases of the debug guide's stall readings built with the project's simulator (fixtures/sim), in-process.

Each writes an input in the exact format the debug skill prints it: asyncio task dumps of the fake SDK's
real tasks (replayed with stamps one second apart, so a long capture fits a short test), and an async-mode
pyinstrument profile of a loop on the fake SDK.
"""

from __future__ import annotations

import pytest


def replayed_dumps(path, *, pending_dumps: int, stop_both_at: int | None = None) -> None:
    """Task dumps of the simulated SDK, one block per second for each loop, as the debug skill prints them.

    The tasks are real: the fake SDK's holder loop with a forward_backward submitted to a service that
    queues it, and a main loop whose `main` task awaits it. The capture is replayed with stamps one second
    apart (a long capture in a short test): `pending_dumps` blocks show the request pending, then three show
    it delivered. With `stop_both_at`, both loops print nothing for 5 s from that block on.
    """
    import asyncio
    import sys
    from datetime import datetime, timedelta

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "fixtures"))
    from sim import dumps, service

    clock = service.ClockService(cycle_s=0.05, queue_delay_cycles=4)
    client = service.ServiceClient(clock, seed=7)
    holder = client.holder
    main_loop = asyncio.new_event_loop()
    try:
        training = main_loop.run_until_complete(client.create_lora_training_client("Qwen/Qwen3-8B", rank=32))
        datum = {"context_key": 1, "target_tokens": [1, 2, 3]}
        future = training.forward_backward([datum], loss_fn="cross_entropy")

        async def main() -> None:
            await future.result_async()

        main_task = main_loop.create_task(main(), name="main")

        start = datetime(2026, 3, 5, 12, 0, 0)
        stamp = start.strftime("%Y-%m-%d %H:%M:%S")

        def holder_block() -> str:
            """The SDK loop's dump as it is now (task states are read when printed), stamped `start`."""

            async def dump() -> str:
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                return dumps.format_task_dump("holder", tasks, 1.0, at=start)

            return asyncio.run_coroutine_threadsafe(dump(), holder.loop).result()

        waiting = holder_block() + dumps.format_task_dump("main", [main_task], 1.0, at=start)
        future.result()
        delivered = holder_block() + dumps.format_task_dump("main", [main_task], 1.0, at=start)
        blocks = []
        for i in range(pending_dumps + 3):
            if stop_both_at is not None and stop_both_at <= i < stop_both_at + 5:
                continue
            at = (start + timedelta(seconds=i)).strftime("%Y-%m-%d %H:%M:%S")
            blocks.append((waiting if i < pending_dumps else delivered).replace(stamp, at))
        path.write_text("".join(blocks))
        main_loop.run_until_complete(main_task)
    finally:
        client.close()
        main_loop.close()


def profile_awaiting_results(path, steps: int = 4) -> None:
    """An async-mode pyinstrument profile of a loop on the simulated SDK whose results come back late (a service
    queue of 8 cycles): each step submits forward_backward and optim_step, prepares the next batch (a few tens of
    ms of CPU) and awaits their result_async."""
    import asyncio
    import sys
    import time

    from conftest import ROOT

    pyinstrument = pytest.importorskip("pyinstrument")
    from pyinstrument.renderers import JSONRenderer

    sys.path.insert(0, str(ROOT / "fixtures"))
    from sim import service

    client = service.ServiceClient(service.ClockService(cycle_s=0.05, queue_delay_cycles=8), seed=3)

    async def train() -> None:
        training = await client.create_lora_training_client("Qwen/Qwen3-8B", rank=32)
        profiler = pyinstrument.Profiler(async_mode="enabled", interval=0.002)
        profiler.start()
        for step in range(steps):
            datum = {"context_key": step, "target_tokens": [1, 2, 3]}
            fwd_bwd = training.forward_backward([datum], loss_fn="cross_entropy")
            optim = training.optim_step(service.AdamParams(learning_rate=1e-4))
            # 40 ms of client work per step (preparing the next batch) while the requests are in flight: timed, not
            # counted, so a loaded machine does not change the profile's shares.
            busy_until = time.perf_counter() + 0.04
            while time.perf_counter() < busy_until:
                sorted(str(i * 7919 % 10007) for i in range(200))
            await fwd_bwd.result_async()
            await optim.result_async()
        profiler.stop()
        path.write_text(profiler.output(JSONRenderer()))

    try:
        asyncio.run(train())
    finally:
        client.close()
