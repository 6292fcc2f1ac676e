"""The reference's sqs_queue (onestep-sqs), driven by the Rust interop test (tests/interop.rs).

Usage: sqs_interop.py send ENDPOINT QUEUE_URL N     -> sends N envelopes {"id": i} (meta, attempts)
       sqs_interop.py consume ENDPOINT QUEUE_URL N  -> acks N messages, prints them as JSON lines
                                                       {"body", "meta", "attempts"}
       sqs_interop.py retry ENDPOINT QUEUE_URL      -> takes one message and retries it (the
                                                       reference's visibility 0), leaving it to
                                                       the next consumer
The connector uses the emulator's test credentials in region us-east-1.
"""

from __future__ import annotations

import asyncio
import json
import sys

from onestep.envelope import Envelope
from onestep_sqs import SQSConnector


def queue_of(endpoint: str, url: str):
    connector = SQSConnector(
        region_name="us-east-1",
        options={
            "endpoint_url": endpoint,
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing-secret",
        },
    )
    return connector, connector.queue(url, wait_time_s=1, delete_flush_interval_s=0)


def show(delivery) -> None:
    e = delivery.envelope
    print(json.dumps({"body": e.body, "meta": e.meta, "attempts": e.attempts}), flush=True)


async def take(queue, n: int) -> list:
    out = []
    for _ in range(60):
        out.extend(await queue.fetch(n - len(out)))
        if len(out) >= n:
            break
    return out


async def send(endpoint: str, url: str, n: int) -> None:
    connector, queue = queue_of(endpoint, url)
    for i in range(1, n + 1):
        body = {"id": i, "text": "é✓", "big": 2**70, "ratio": 0.1}
        await queue.send(Envelope(body=body, meta={"from": "python"}, attempts=i % 3))
    await queue.close()
    await connector.close()


async def consume(endpoint: str, url: str, n: int) -> None:
    connector, queue = queue_of(endpoint, url)
    for delivery in await take(queue, n):
        show(delivery)
        await delivery.ack()
    await queue.close()
    await connector.close()


async def retry(endpoint: str, url: str) -> None:
    connector, queue = queue_of(endpoint, url)
    [first] = await take(queue, 1)
    show(first)
    await first.retry(delay_s=0)
    await queue.close()
    await connector.close()


if __name__ == "__main__":
    command, endpoint, url = sys.argv[1], sys.argv[2], sys.argv[3]
    if command == "send":
        asyncio.run(send(endpoint, url, int(sys.argv[4])))
    elif command == "consume":
        asyncio.run(consume(endpoint, url, int(sys.argv[4])))
    else:
        asyncio.run(retry(endpoint, url))
