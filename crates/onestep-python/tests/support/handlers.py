"""Handlers the onestep-python tests run (imported as `handlers` from this directory)."""
import asyncio
import datetime
import os
import uuid
from pathlib import Path


def sync_echo(ctx, payload, *, suffix=""):
    print("a print() goes to stderr, not into the protocol")
    return {
        "kind": type(payload["at"]).__name__,
        "at_plus_a_day": payload["at"] + datetime.timedelta(days=1),
        "id": uuid.UUID(ctx.current.meta["onestep.execution"]["id"]),
        "pair": (1, "two"),
        "task": ctx.task.name,
        "config": ctx.config,
        "attempts": ctx.current.attempts,
        "suffix": suffix,
    }


async def async_state_and_emit(ctx, payload):
    seen = await ctx.state.get("seen", 0)
    await ctx.state.set("seen", seen + 1)
    nested = ctx.state.scope("inner")
    await nested.save("k", {"v": payload})
    await ctx.emit({"echo": payload}, meta={"from": "python"})
    ctx.metrics.counter("handled", labels={"kind": "test"}).inc()
    return {"seen_before": seen, "inner": await nested.load("k")}


def fail_first(ctx, payload):
    if ctx.current.attempts == 0:
        raise ValueError("first attempts fail: %s" % payload)
    return "ok after %d" % ctx.current.attempts


def crash_first(ctx, payload):
    marker = Path(payload["marker"])
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        os._exit(3)
    return {"pid": os.getpid(), "crashed_pid": int(marker.read_text())}


async def slow(ctx, payload):
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        Path(payload["marker"]).write_text("cancelled")
        raise
    return "not reached"


not_callable = 42


# --- callbacks: hooks, transforms, predicates, event subscribers ---------------------------------


def has_items(ctx, payload, result):
    return result["items"]  # a list: Python's truth decides the route


async def shape(ctx, payload, result, *, label="shaped"):
    return {"label": label, "task": ctx.task.name, "in": payload, "count": len(result["items"])}


async def remember_payload(ctx, payload):
    await ctx.state.set("before", payload)


def first_only(value):
    return {"got": value}


def describe_failure(failure):
    return "%s:%s:%s" % (failure.kind.value, failure.exception_type, failure.message)


def describe_event(event):
    return {"kind": event.kind.value, "task": event.task, "attempts": event.attempts,
            "aware": event.emitted_at.tzinfo is not None, "failure": event.failure.as_dict()}


def describe_app(app):
    return "%s in %s" % (app.name, app.config["region"])


def report_progress(ctx, payload):
    """Reports progress twice (the last one is kept) and tells which bad values were refused."""
    refused = {}
    for name, value in (("not_json", {1, 2}), ("nul", "a\x00b"), ("too_large", "x" * 70000)):
        try:
            ctx.report_progress(value)
        except (TypeError, ValueError) as exc:
            refused[name] = "%s: %s" % (type(exc).__name__, exc)
    ctx.report_progress({"done": 1, "total": payload["total"]})
    ctx.report_progress({"done": payload["total"], "total": payload["total"], "stage": "écrit"})
    return refused


async def report_progress_async(ctx, payload):
    ctx.report_progress({"done": payload["total"], "async": True})
    return "ok"
