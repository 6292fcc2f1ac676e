"""The functions worker.yaml names; each leaves a file in app.config["out"] to be checked."""
import json
import os
from pathlib import Path


def _out(ctx_or_app):
    config = getattr(ctx_or_app, "config", None)
    return Path(config["out"])


def _write(directory, name, value):
    path = Path(directory) / name
    path.write_text(json.dumps(value))


def on_startup(app):
    _write(app.config["out"], "startup.json", {"name": app.name, "pid": os.getpid()})


def on_shutdown(app):
    _write(app.config["out"], "shutdown.json", {"name": app.name})


def on_event(event, *, prefix):
    # The app's config is not passed to event subscribers; the environment names the directory.
    with open(Path(os.environ["PARITY_OUT"]) / "events.txt", "a") as f:
        f.write("%s %s %s %d\n" % (prefix, event.task, event.kind.value, event.attempts))


async def produce(ctx, payload):
    count = await ctx.state.get("count", 0)
    await ctx.state.set("count", count + 1)
    ctx.logger.info("produced %d", count)
    ctx.metrics.counter("produced_total", labels={"source": "tick"}).inc()
    return {"n": count, "payload": payload}


def before(ctx, payload):
    _write(_out(ctx), "before.json", payload)


def after(ctx, payload, result, *, tag):
    _write(_out(ctx), "after-%d.json" % result["n"], {"tag": tag})


def is_even(ctx, payload, result):
    return result["n"] % 2 == 0


async def double(ctx, payload, result, *, factor):
    return {"n": result["n"], "doubled": result["n"] * factor, "task": ctx.task.name}


def record(ctx, payload):
    _write(_out(ctx), "even-%d.json" % payload["n"], payload)


def reject(ctx, payload):
    raise ValueError("odd n %d" % payload["n"])


def note_failure(ctx, payload, failure):
    _write(_out(ctx), "failure-%d.json" % payload["n"], failure.as_dict() | {"kind": failure.kind.value})


# --- seeded.yaml -----------------------------------------------------------------------------


async def seed(app):
    queue = app.resources["incoming"]
    for n in range(app.config["expected_rows"]):
        await queue.publish({"n": n, "via": queue.name})


_seen = []


def take_and_stop(ctx, payload):
    _seen.append(payload["n"])
    _write(_out(ctx), "taken.json", sorted(_seen))
    if len(_seen) >= ctx.config["expected_rows"]:
        ctx.app.request_shutdown()
    return payload
