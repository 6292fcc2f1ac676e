"""The reference's redis_stream, driven by the Rust interop test (tests/interop.rs).

Usage: redis_interop.py send URL STREAM N        -> appends N envelopes {"id": i} (meta, attempts)
       redis_interop.py consume URL STREAM GROUP N -> reads and acks N entries, prints them as
                                                     JSON lines {"body", "meta", "attempts"}
"""

from __future__ import annotations

import asyncio
import json
import sys

from onestep.envelope import Envelope
from onestep_redis import RedisConnector


async def send(url: str, stream: str, n: int) -> None:
    connector = RedisConnector(url)
    queue = connector.stream(stream, group="py-senders")
    for i in range(1, n + 1):
        await queue.send(Envelope(body={"id": i, "text": "é✓"}, meta={"from": "python"}, attempts=i % 3))
    await queue.close()
    await connector.close()


async def consume(url: str, stream: str, group: str, n: int) -> None:
    connector = RedisConnector(url)
    queue = connector.stream(stream, group=group, start_id="0", poll_interval_s=0.1)
    seen = 0
    for _ in range(200):
        for delivery in await queue.fetch(10):
            e = delivery.envelope
            print(json.dumps({"body": e.body, "meta": e.meta, "attempts": e.attempts}), flush=True)
            await delivery.ack()
            seen += 1
        if seen >= n:
            break
    await queue.close()
    await connector.close()


if __name__ == "__main__":
    command, url, stream = sys.argv[1], sys.argv[2], sys.argv[3]
    if command == "send":
        asyncio.run(send(url, stream, int(sys.argv[4])))
    else:
        asyncio.run(consume(url, stream, sys.argv[4], int(sys.argv[5])))
