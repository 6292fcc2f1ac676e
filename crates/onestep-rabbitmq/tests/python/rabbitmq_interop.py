"""The reference's rabbitmq_queue (onestep-mq), driven by the Rust interop test (tests/interop.rs).

Usage: rabbitmq_interop.py send URL QUEUE N     -> publishes N envelopes {"id": i} (meta, attempts)
       rabbitmq_interop.py consume URL QUEUE N  -> acks N messages, prints them as JSON lines
                                                   {"body", "meta", "attempts"}
       rabbitmq_interop.py retry URL QUEUE      -> takes one message, retries it (the reference's
                                                   nack with requeue), then takes and acks it again
Queues are declared as the Rust test declares them: durable, x-expires 60000.
"""

from __future__ import annotations

import asyncio
import json
import sys

from onestep.envelope import Envelope
from onestep_rabbitmq import RabbitMQConnector


def queue_of(url: str, name: str):
    connector = RabbitMQConnector(url)
    return connector, connector.queue(name, arguments={"x-expires": 60000}, poll_interval_s=0.1)


def show(delivery) -> None:
    e = delivery.envelope
    print(json.dumps({"body": e.body, "meta": e.meta, "attempts": e.attempts}), flush=True)


async def send(url: str, name: str, n: int) -> None:
    connector, queue = queue_of(url, name)
    for i in range(1, n + 1):
        await queue.send(Envelope(body={"id": i, "text": "é✓"}, meta={"from": "python"}, attempts=i % 3))
    await queue.close()
    await connector.close()


async def consume(url: str, name: str, n: int) -> None:
    connector, queue = queue_of(url, name)
    seen = 0
    while seen < n:
        for delivery in await asyncio.wait_for(queue.fetch(n - seen), timeout=20):
            show(delivery)
            await delivery.ack()
            seen += 1
    await queue.close()
    await connector.close()


async def retry(url: str, name: str) -> None:
    connector, queue = queue_of(url, name)
    [first] = await asyncio.wait_for(queue.fetch(1), timeout=20)
    show(first)
    await first.retry(delay_s=0)
    [again] = await asyncio.wait_for(queue.fetch(1), timeout=20)
    show(again)
    await again.ack()
    await queue.close()
    await connector.close()


if __name__ == "__main__":
    command, url, name = sys.argv[1], sys.argv[2], sys.argv[3]
    if command == "send":
        asyncio.run(send(url, name, int(sys.argv[4])))
    elif command == "consume":
        asyncio.run(consume(url, name, int(sys.argv[4])))
    else:
        asyncio.run(retry(url, name))
