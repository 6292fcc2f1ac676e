"""The reference's HttpSink, driven by the Rust parity test (tests/outbound.rs).

Usage: http_sink_parity.py SPEC_JSON ENVELOPE_JSON
SPEC_JSON holds the sink's keyword arguments (url, method, headers, params, body, timeout_s,
success_statuses); ENVELOPE_JSON is {"body", "meta", "attempts"}. Sends once and prints "ok",
or the error's kind and message.
"""

from __future__ import annotations

import asyncio
import json
import sys

from onestep.connectors.http import HttpSink
from onestep.envelope import Envelope
from onestep.resilience import ConnectorOperationError


async def main(spec: dict, envelope: dict) -> None:
    sink = HttpSink("parity", **spec)
    try:
        await sink.send(Envelope(body=envelope["body"], meta=envelope["meta"], attempts=envelope["attempts"]))
        print("ok")
    except ConnectorOperationError as exc:
        print(f"{exc.kind.value}: {exc}")


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1]), json.loads(sys.argv[2])))
