"""The Python side of `tests/python_interop.rs`: the real reference (onestep 1.15.0 +
onestep-sql 0.7.1) driven from the Rust tests.

Usage: ``interop.py COMMAND < JSON-ARGS`` (a JSON object on standard input, UTF-8), or
``interop.py session``, which reads one request per line (``{"command": …, "args": {…}}``) so
a test pays for the imports once. Each command answers with one JSON line on stdout:
``{"ok": true, ...}`` or ``{"ok": false, "error": "<exception class>", "message": "..."}``
(expected errors, such as ExecutionConflict, are reported this way; tracebacks go to stderr).

Every command takes ``backend`` ("postgres" or "mysql"), ``dsn`` (an SQLAlchemy async URL:
``postgresql+psycopg://…`` or ``mysql+asyncmy://…``), ``table``, ``attempts_table`` and
optionally ``auto_create`` (default true). Values in payloads, metadata and results travel in
the tagged JSON of ``onestep.capture.codec`` (``{"$onestep": {"type": "datetime", …}}``), decoded
into Python objects on the way in and encoded on the way out. Ids are strings.

Commands:
  versions       -> installed onestep / onestep-sql / SQLAlchemy versions
  create-tables  -> opens a backend with auto_create=True and closes it
  submit         namespace, task, payload, [metadata, idempotency_key, delay_s, expires_at (ISO
                 8601 with an offset)] -> {"execution": …}
  get            namespace, id -> {"execution": … | null}
  result         namespace, id -> {"result": …} or the client's exception
  list           namespace, [task, status, limit, cursor] -> {"items": [...], "next_cursor": …}
  cancel         namespace, id, [reason] -> {"execution": … | null}
  complete       namespace, task, status, [result, error (ExecutionErrorDetail fields), delay_s]
                 -> claims one execution of the task and completes it -> {"execution": …}
  work           namespace, task, ids, [timeout_s, lease_duration_s, heartbeat_interval_s,
                 poll_interval_s] -> runs a OneStepApp worker with an execution source until every
                 id is terminal (or the timeout), then {"handled": [...], "statuses": {...},
                 "timed_out": bool}. The handler returns {"doubled": n * 2, "worker": "python",
                 "echo": payload.get("echo")}, sleeps payload["sleep_s"] first when given, and
                 raises ValueError when payload["fail"] is true.
  state-save     backend ("postgres", "mysql" or "sqlite"), dsn, key, value, [kind ("state" or
                 "cursor"), table, key_column, value_column, updated_at_column, auto_create,
                 datetimes (a cursor's list components given as {"datetime": iso} become
                 datetime objects)] -> saves through the reference's SQLAlchemy store -> {}
  state-load     the same fields but value -> {"found": bool, "text": json.dumps(value,
                 ensure_ascii=False) with datetimes as {"datetime": iso}}
  table-queue-work  backend, dsn, table, key, where, claim, ack, nack, [timeout_s] -> runs a
                 OneStepApp on the reference's table queue until no row of the table is left
                 outside ack's status (or the timeout) -> {"handled": [keys], "timed_out": bool}
  incremental-read  backend, dsn, table, key, cursor, [where], cursor_table -> opens the
                 reference's incremental source with a cursor store on cursor_table, fetches and
                 acks until nothing is left -> {"read": [keys], "state_key": str}
  binlog-read    dsn, server_id, tables, cursor_table -> opens the reference's binlog source
                 with a cursor store on cursor_table, fetches and acks until a fetch finds
                 nothing -> {"read": [values.id], "positions": [binlog], "state_key": str}
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import sys
import time
import traceback
from datetime import datetime
from importlib.metadata import version
from typing import Any

from onestep import (
    ExecutionClient,
    ExecutionCompletion,
    ExecutionErrorDetail,
    ExecutionStatus,
    OneStepApp,
)
from onestep.capture.codec import decode_value, encode_value

TERMINAL = {"succeeded", "failed", "cancelled", "expired"}


def make_backend(args: dict[str, Any], *, auto_create: bool | None = None) -> Any:
    options = {
        "dsn": args["dsn"],
        "table": args["table"],
        "attempts_table": args["attempts_table"],
        "auto_create": args.get("auto_create", True) if auto_create is None else auto_create,
    }
    if args["backend"] == "postgres":
        from onestep_sql.postgres import PostgresExecutionBackend

        return PostgresExecutionBackend(**options)
    if args["backend"] == "mysql":
        from onestep_sql.mysql import MySQLExecutionBackend

        return MySQLExecutionBackend(**options)
    raise ValueError(f"unknown backend {args['backend']!r}")


def iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def execution_json(execution: Any) -> dict[str, Any] | None:
    if execution is None:
        return None
    return {
        "id": str(execution.id),
        "namespace": execution.namespace,
        "task_name": execution.task_name,
        "status": execution.status.value,
        "payload": encode_value(execution.payload),
        "metadata": encode_value(dict(execution.metadata)),
        "result": encode_value(execution.result),
        "error": None if execution.error is None else dataclasses.asdict(execution.error),
        "attempts": execution.attempts,
        "version": execution.version,
        "created_at": iso(execution.created_at),
        "available_at": iso(execution.available_at),
        "started_at": iso(execution.started_at),
        "finished_at": iso(execution.finished_at),
        "cancel_requested_at": iso(execution.cancel_requested_at),
        "expires_at": iso(execution.expires_at),
    }


def failure(exc: BaseException) -> dict[str, Any]:
    out: dict[str, Any] = {"ok": False, "error": type(exc).__name__, "message": str(exc)}
    execution = getattr(exc, "execution", None)
    if execution is not None:
        out["execution"] = execution_json(execution)
    return out


async def cmd_versions(args: dict[str, Any]) -> dict[str, Any]:
    return {
        "onestep": version("onestep"),
        "onestep_sql": version("onestep-sql"),
        "sqlalchemy": version("SQLAlchemy"),
    }


async def cmd_create_tables(args: dict[str, Any]) -> dict[str, Any]:
    backend = make_backend(args, auto_create=True)
    await backend.open()
    await backend.close()
    return {}


async def cmd_submit(args: dict[str, Any]) -> dict[str, Any]:
    expires_at = args.get("expires_at")
    async with ExecutionClient(make_backend(args), namespace=args["namespace"]) as client:
        execution = await client.submit(
            args["task"],
            decode_value(args["payload"]),
            idempotency_key=args.get("idempotency_key"),
            metadata=decode_value(args.get("metadata") or {}),
            delay_s=args.get("delay_s"),
            expires_at=None if expires_at is None else datetime.fromisoformat(expires_at),
        )
    return {"execution": execution_json(execution)}


async def cmd_get(args: dict[str, Any]) -> dict[str, Any]:
    async with ExecutionClient(make_backend(args), namespace=args["namespace"]) as client:
        return {"execution": execution_json(await client.get(args["id"]))}


async def cmd_result(args: dict[str, Any]) -> dict[str, Any]:
    async with ExecutionClient(make_backend(args), namespace=args["namespace"]) as client:
        return {"result": encode_value(await client.result(args["id"]))}


async def cmd_list(args: dict[str, Any]) -> dict[str, Any]:
    status = args.get("status")
    async with ExecutionClient(make_backend(args), namespace=args["namespace"]) as client:
        page = await client.list(
            task_name=args.get("task"),
            status=None if status is None else ExecutionStatus(status),
            limit=args.get("limit", 50),
            cursor=args.get("cursor"),
        )
    return {"items": [execution_json(e) for e in page.items], "next_cursor": page.next_cursor}


async def cmd_cancel(args: dict[str, Any]) -> dict[str, Any]:
    async with ExecutionClient(make_backend(args), namespace=args["namespace"]) as client:
        execution = await client.cancel(args["id"], reason=args.get("reason"))
    return {"execution": execution_json(execution)}


async def cmd_complete(args: dict[str, Any]) -> dict[str, Any]:
    backend = make_backend(args)
    await backend.open()
    try:
        leases = await backend.claim(
            args["namespace"], [args["task"]], 1, 30.0, "python-interop-claimer"
        )
        if not leases:
            raise LookupError(f"no execution of {args['task']!r} to claim")
        lease = leases[0]
        error = args.get("error")
        completion = ExecutionCompletion(
            status=ExecutionStatus(args["status"]),
            result=decode_value(args.get("result")),
            error=None if error is None else ExecutionErrorDetail(**error),
            delay_s=args.get("delay_s"),
        )
        execution = await backend.complete(
            lease.execution.id, lease.attempt_id, lease.lease_token, completion
        )
    finally:
        await backend.close()
    return {"execution": execution_json(execution)}


async def cmd_work(args: dict[str, Any]) -> dict[str, Any]:
    namespace, task, ids = args["namespace"], args["task"], list(args["ids"])
    worker_backend = make_backend(args)
    source = worker_backend.source(
        namespace=namespace,
        task_names=[task],
        batch_size=args.get("batch_size", 10),
        poll_interval_s=args.get("poll_interval_s", 0.05),
        lease_duration_s=args.get("lease_duration_s", 30.0),
        heartbeat_interval_s=args.get("heartbeat_interval_s", 0.5),
        worker_id="python-interop-worker",
    )
    app = OneStepApp("python-interop", shutdown_timeout_s=10.0)
    handled: list[str] = []

    @app.task(name=task, source=source)
    async def handler(ctx: Any, payload: Any) -> Any:
        handled.append(ctx.current.meta["onestep.execution"]["id"])
        if payload.get("sleep_s"):
            await asyncio.sleep(payload["sleep_s"])
        if payload.get("fail"):
            raise ValueError("python handler failed on purpose")
        return {"doubled": payload["n"] * 2, "worker": "python", "echo": payload.get("echo")}

    serving = asyncio.create_task(app.serve())
    statuses: dict[str, str | None] = {}
    deadline = time.monotonic() + args.get("timeout_s", 20.0)
    timed_out = False
    async with ExecutionClient(make_backend(args), namespace=namespace) as watcher:
        while True:
            for execution_id in ids:
                execution = await watcher.get(execution_id)
                statuses[execution_id] = None if execution is None else execution.status.value
            if all(status in TERMINAL for status in statuses.values()):
                break
            if serving.done() or time.monotonic() > deadline:
                timed_out = not serving.done()
                break
            await asyncio.sleep(0.05)
    app.request_shutdown()
    await asyncio.wait_for(serving, timeout=15.0)
    return {"handled": handled, "statuses": statuses, "timed_out": timed_out}


def make_state_store(args: dict[str, Any]) -> Any:
    module = importlib.import_module(f"onestep_sql.{args['backend']}")
    cls = module.SQLAlchemyCursorStore if args.get("kind") == "cursor" else module.SQLAlchemyStateStore
    names = ("table", "key_column", "value_column", "updated_at_column")
    options = {name: args[name] for name in names if name in args}
    if args.get("kind") == "cursor":
        # The defaults the connectors' cursor_store() factories pass (the class's own are the
        # state table's).
        options.setdefault("key_column", "cursor_key")
        options.setdefault("value_column", "cursor_value")
    return cls(dsn=args["dsn"], auto_create=args.get("auto_create", True), **options)


def with_datetimes(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"datetime"}:
        return datetime.fromisoformat(value["datetime"])
    if isinstance(value, list):
        return [with_datetimes(item) for item in value]
    return value


async def cmd_state_save(args: dict[str, Any]) -> dict[str, Any]:
    store = make_state_store(args)
    try:
        value = with_datetimes(args["value"]) if args.get("datetimes") else args["value"]
        await store.save(args["key"], value)
    finally:
        await store.close()
    return {}


async def cmd_state_load(args: dict[str, Any]) -> dict[str, Any]:
    store = make_state_store(args)
    try:
        value = await store.load(args["key"])
    finally:
        await store.close()
    if value is None:
        return {"found": False, "text": None}
    text = json.dumps(
        value, ensure_ascii=False, default=lambda d: {"datetime": d.isoformat()}
    )
    return {"found": True, "text": text}


def make_connector(args: dict[str, Any]) -> Any:
    module = importlib.import_module(f"onestep_sql.{args['backend']}")
    name = {"postgres": "PostgresConnector", "mysql": "MySQLConnector", "sqlite": "SQLiteConnector"}
    return getattr(module, name[args["backend"]])(args["dsn"])


async def cmd_table_queue_work(args: dict[str, Any]) -> dict[str, Any]:
    import sqlalchemy as sa

    connector = make_connector(args)
    source = connector.table_queue(
        table=args["table"],
        key=args["key"],
        where=args["where"],
        claim=args["claim"],
        ack=args["ack"],
        nack=args.get("nack"),
        batch_size=args.get("batch_size", 5),
        poll_interval_s=0.05,
    )
    app = OneStepApp("python-table-queue", shutdown_timeout_s=10.0)
    handled: list[Any] = []

    @app.task(name="rows", source=source, concurrency=2)
    async def handler(ctx: Any, row: Any) -> Any:
        handled.append(row[args["key"]])
        await asyncio.sleep(0.02)
        return None

    serving = asyncio.create_task(app.serve())
    done_status = args["ack"]["status"]
    deadline = time.monotonic() + args.get("timeout_s", 30.0)
    timed_out = False
    count = sa.text(f"SELECT COUNT(*) FROM {args['table']} WHERE status <> :done")
    while True:
        async with connector.engine.connect() as conn:
            left = (await conn.execute(count, {"done": done_status})).scalar_one()
        if left == 0 or serving.done():
            break
        if time.monotonic() > deadline:
            timed_out = True
            break
        await asyncio.sleep(0.05)
    app.request_shutdown()
    await asyncio.wait_for(serving, timeout=15.0)
    await connector.close()
    return {"handled": handled, "timed_out": timed_out}


async def cmd_incremental_read(args: dict[str, Any]) -> dict[str, Any]:
    connector = make_connector(args)
    store = connector.cursor_store(table=args["cursor_table"])
    source = connector.incremental(
        table=args["table"],
        key=args["key"],
        cursor=args["cursor"],
        where=args.get("where"),
        batch_size=args.get("batch_size", 3),
        state=store,
    )
    await source.open()
    read: list[Any] = []
    while True:
        batch = await source.fetch(10)
        if not batch:
            break
        for delivery in batch:
            read.append(delivery.envelope.body[args["key"]])
            await delivery.ack()
    await source.close()
    await connector.close()
    return {"read": read, "state_key": source.state_key}


async def cmd_binlog_read(args: dict[str, Any]) -> dict[str, Any]:
    connector = make_connector({"backend": "mysql", "dsn": args["dsn"]})
    store = connector.cursor_store(table=args["cursor_table"])
    source = connector.binlog(
        server_id=args["server_id"],
        tables=args["tables"],
        batch_size=args.get("batch_size", 4),
        state=store,
    )
    await source.open()
    read: list[Any] = []
    positions: list[Any] = []
    while True:
        batch = await source.fetch(10)
        if not batch:
            break
        for delivery in batch:
            body = delivery.envelope.body
            read.append(body["values"]["id"])
            positions.append(body["binlog"])
            await delivery.ack()
    await source.close()
    await connector.close()
    return {"read": read, "positions": positions, "state_key": source.state_key}


COMMANDS = {
    "versions": cmd_versions,
    "create-tables": cmd_create_tables,
    "submit": cmd_submit,
    "get": cmd_get,
    "result": cmd_result,
    "list": cmd_list,
    "cancel": cmd_cancel,
    "complete": cmd_complete,
    "work": cmd_work,
    "state-save": cmd_state_save,
    "state-load": cmd_state_load,
    "table-queue-work": cmd_table_queue_work,
    "incremental-read": cmd_incremental_read,
    "binlog-read": cmd_binlog_read,
}


def run_command(name: str, args: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"ok": True, **asyncio.run(COMMANDS[name](args))}
    except Exception as exc:  # reported to the Rust side by class name
        traceback.print_exc()
        return failure(exc)


def main() -> int:
    if len(sys.argv) == 2 and sys.argv[1] == "session":
        # One request per line: {"command": ..., "args": {...}}; one answer line each.
        for line in sys.stdin.buffer:
            if not line.strip():
                continue
            request = json.loads(line.decode("utf-8"))
            out = run_command(request["command"], request["args"])
            print(json.dumps(out, sort_keys=True), flush=True)
        return 0
    if len(sys.argv) != 2 or sys.argv[1] not in COMMANDS:
        print(f"usage: interop.py {{session|{'|'.join(COMMANDS)}}} < JSON-ARGS", file=sys.stderr)
        return 2
    args = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    print(json.dumps(run_command(sys.argv[1], args), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
