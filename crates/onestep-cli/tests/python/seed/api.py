"""The API side of the PostgreSQL seed document, run by the reference: the one-time table
creation of its deploy script, then ExecutionClient submits and reads back (section 5).

`api.py COMMAND` reads its arguments as JSON on stdin and prints one JSON line:
  create_tables {dsn}
  submit {dsn, count}            -> {"ids": [...]}
  wait {dsn, ids, timeout_s}     -> {"executions": [{id, status, result, attempts}]}
"""
import asyncio
import json
import sys
import time
from uuid import UUID

from onestep import ExecutionClient
from onestep_sql.postgres import PostgresExecutionBackend


def backend(dsn, auto_create=False):
    return PostgresExecutionBackend(
        dsn=dsn,
        table="onestep_executions",
        attempts_table="onestep_execution_attempts",
        auto_create=auto_create,
    )


async def create_tables(args):
    b = backend(args["dsn"], auto_create=True)
    await b.open()
    await b.close()
    return {}


async def submit(args):
    async with ExecutionClient(backend(args["dsn"]), namespace="agent-api") as client:
        ids = []
        for i in range(args["count"]):
            execution = await client.submit(
                "run_agent", {"document_id": "doc-%d" % i}, metadata={"request_id": "r-%d" % i}
            )
            ids.append(str(execution.id))
        return {"ids": ids}


async def wait(args):
    deadline = time.monotonic() + args["timeout_s"]
    async with ExecutionClient(backend(args["dsn"]), namespace="agent-api") as client:
        while True:
            executions = [await client.get(UUID(i)) for i in args["ids"]]
            if all(e.terminal for e in executions) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        out = []
        for e in executions:
            result = await client.result(e.id) if e.status.value == "succeeded" else None
            out.append({"id": str(e.id), "status": e.status.value, "attempts": e.attempts, "result": result})
        return {"executions": out}


COMMANDS = {"create_tables": create_tables, "submit": submit, "wait": wait}

if __name__ == "__main__":
    args = json.loads(sys.stdin.read() or "{}")
    print(json.dumps(asyncio.run(COMMANDS[sys.argv[1]](args))))
