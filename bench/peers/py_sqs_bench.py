"""The reference's sqs_queue (onestep-sqs) drained, for `cargo xtask bench --peers` beside
`crates/onestep-sqs/examples/sqs_drain.rs` (the same endpoint, messages and settings).

Usage: py_sqs_bench.py <endpoint URL> [n=5000] [concurrency=32]

Against an SQS endpoint (moto in the bench; region us-east-1, its test credentials): sends n
envelopes to a fresh queue in batches of ten, drains it with one OneStepApp whose handler does
nothing (ten per receive, deletes grouped by ten), prints one JSON line {"source", "backend",
"n", "drain_per_s", "seconds"} and deletes the queue.
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
from onestep_sqs import SQSConnector


async def main(endpoint: str, n: int, concurrency: int) -> dict:
    options = {
        "endpoint_url": endpoint,
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing-secret",
    }
    connector = SQSConnector(region_name="us-east-1", options=options)
    client = connector.get_client()
    url = client.create_queue(QueueName=f"onestep-bench-py-{os.getpid()}")["QueueUrl"]
    for start in range(0, n, 10):
        entries = [
            {
                "Id": f"m{i}",
                "MessageBody": encode_envelope(
                    Envelope(body={"id": i, "payload": "order of the benchmark"})
                ).decode("utf-8"),
            }
            for i in range(start, min(start + 10, n))
        ]
        client.send_message_batch(QueueUrl=url, Entries=entries)
    source = connector.queue(url, wait_time_s=1, batch_size=10)
    app = OneStepApp("sqs-drain", shutdown_timeout_s=30.0)
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
    await asyncio.wait_for(serving, timeout=60.0)
    client.delete_queue(QueueUrl=url)
    await connector.close()
    return {
        "source": "sqs_queue",
        "backend": "sqs",
        "n": n,
        "concurrency": concurrency,
        "seconds": seconds,
        "drain_per_s": round(n / seconds),
    }


if __name__ == "__main__":
    endpoint = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    concurrency = int(sys.argv[3]) if len(sys.argv) > 3 else 32
    print(json.dumps(asyncio.run(main(endpoint, n, concurrency))))
