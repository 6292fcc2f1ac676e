from __future__ import annotations

from typing import Any


def normalize_payload(payload: dict[str, Any], *, app_name: str) -> dict[str, Any]:
    return {
        "app": app_name,
        "message": str(payload.get("message") or "hello onestep"),
        "payload": payload,
    }
