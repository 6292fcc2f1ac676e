"""The reference's rabbitmq_queue (onestep-mq) drained, for `cargo xtask bench --peers` beside
`crates/onestep-rabbitmq/examples/queue_drain.rs` (the same queue, messages and settings).

Usage: py_rabbitmq_bench.py <amqp URL> [n=5000] [concurrency=32]

Publishes n persistent envelopes to a fresh durable queue, drains it with one OneStepApp whose
handler does nothing (prefetch 100, batch 100), prints one JSON line {"source", "backend", "n",
"drain_per_s", "seconds"} and deletes the queue.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import aio_pika
from onestep import OneStepApp
from onestep.connectors.codec import encode_envelope
from onestep.envelope import Envelope
from onestep_rabbitmq import RabbitMQConnector


async def main(url: str, n: int, concurrency: int) -> dict:
    name = f"onestep-bench-py.{os.getpid()}"
    raw = await aio_pika.connect(url)
    channel = await raw.channel(publisher_confirms=False)
    await channel.declare_queue(name, durable=True)
    for i in range(n):
        body = encode_envelope(Envelope(body={"id": i, "payload": "order of the benchmark"}))
        await channel.default_exchange.publish(
            aio_pika.Message(body=body, content_type="application/json", delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key=name,
        )
    connector = RabbitMQConnector(url)
    source = connector.queue(name, prefetch=100, batch_size=100, poll_interval_s=0.02)
    app = OneStepApp("queue-drain", shutdown_timeout_s=10.0)
    handled = 0

    @app.task(name="messages", source=source, concurrency=concurrency)
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
    await channel.queue_delete(name)
    await raw.close()
    await connector.close()
    return {
        "source": "rabbitmq_queue",
        "backend": "rabbitmq",
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
