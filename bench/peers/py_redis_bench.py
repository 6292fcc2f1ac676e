"""The reference's redis_stream drained, for `cargo xtask bench --peers` beside
`crates/onestep-redis/examples/stream_drain.rs` (the same stream, entries and settings).

Usage: py_redis_bench.py <redis URL> [n=5000] [concurrency=32]

Appends n envelopes to a fresh stream, drains it with one OneStepApp whose handler does nothing,
prints one JSON line {"source", "backend", "n", "drain_per_s", "seconds"} and deletes the stream.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from onestep import OneStepApp
from onestep.connectors.codec import encode_envelope
from onestep.envelope import Envelope
from onestep_redis import RedisConnector
from redis.asyncio import Redis


async def main(url: str, n: int, concurrency: int) -> dict:
    name = f"onestep-bench-py:{os.getpid()}"
    raw = Redis.from_url(url)
    await raw.delete(name)
    async with raw.pipeline(transaction=False) as pipe:
        for i in range(n):
            pipe.xadd(name, {"body": encode_envelope(Envelope(body={"id": i, "payload": "order of the benchmark"}))})
        await pipe.execute()
    connector = RedisConnector(url)
    source = connector.stream(name, group="bench", start_id="0", batch_size=100, poll_interval_s=0.02)
    app = OneStepApp("stream-drain", shutdown_timeout_s=10.0)
    handled = 0

    @app.task(name="entries", source=source, concurrency=concurrency)
    async def handler(ctx, body):
        nonlocal handled
        handled += 1
        return None

    started = time.monotonic()
    serving = asyncio.create_task(app.serve())
    while handled < n:
        if time.monotonic() - started > 900:
            raise RuntimeError("the drain did not finish within 900 s")
        await asyncio.sleep(0.005)
    seconds = time.monotonic() - started
    app.request_shutdown()
    await asyncio.wait_for(serving, timeout=30.0)
    await raw.delete(name)
    await raw.aclose()
    await connector.close()
    return {
        "source": "redis_stream",
        "backend": "redis",
        "n": n,
        "concurrency": concurrency,
        "seconds": seconds,
        "drain_per_s": round(n / seconds),
    }


if __name__ == "__main__":
    url = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    concurrency = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    print(json.dumps(asyncio.run(main(url, n, concurrency))))
