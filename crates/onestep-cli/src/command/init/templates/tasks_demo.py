from __future__ import annotations

import json
from typing import Any

from ..transforms.demo import normalize_payload


async def run_demo(ctx, payload: dict[str, Any]) -> None:
    row = normalize_payload(payload, app_name=ctx.app.name)
    print(json.dumps(row, ensure_ascii=False))


async def run_cdc(ctx, event: dict[str, Any]) -> dict[str, Any]:
    """Unwrap a binlog change event into the row the table sink writes.

    The sink derives columns from dict keys, so the schema/table/binlog
    envelope must be stripped first; ``values`` holds the row itself.
    Delete events also carry the pre-delete row in ``values`` and would be
    upserted back — add ``delete`` to the source's ``events`` list in
    worker.yaml only if re-inserting deleted rows is intended.
    """
    row = normalize_payload(event["values"], app_name=ctx.app.name)
    print(json.dumps(row, ensure_ascii=False))
    return event["values"]
