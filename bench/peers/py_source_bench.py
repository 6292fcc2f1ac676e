"""The reference's SQL sources drained, for `cargo xtask bench --peers` beside
`crates/onestep-sql/examples/source_drain.rs` (the same table, rows and settings).

Usage: py_source_bench.py <table_queue|incremental|binlog> <SQLAlchemy URL> [n=5000]
       [concurrency=32]

Creates a table of n rows (id, status, payload), drains it with one OneStepApp whose handler does
nothing, prints one JSON line {"source", "backend", "n", "drain_per_s", "seconds"} and drops the
table. `binlog` opens the reference's binlog source before writing the rows and drains their
insert events.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid

import sqlalchemy as sa
from onestep import OneStepApp


def connector_for(url: str):
    if url.startswith("postgresql"):
        from onestep_sql.postgres import PostgresConnector

        return "postgres", PostgresConnector(url)
    if url.startswith("mysql"):
        from onestep_sql.mysql import MySQLConnector

        return "mysql", MySQLConnector(url)
    from onestep_sql.sqlite import SQLiteConnector

    return "sqlite", SQLiteConnector(url)


async def main(source_kind: str, url: str, n: int, concurrency: int) -> dict:
    backend, connector = connector_for(url)
    table = f"drain_{uuid.uuid4().hex[:10]}"
    async with connector.engine.begin() as conn:
        await conn.execute(
            sa.text(
                f"CREATE TABLE {table} (id BIGINT NOT NULL PRIMARY KEY, "
                "status VARCHAR(20) NOT NULL, payload VARCHAR(200))"
            )
        )
    source = None
    if source_kind == "binlog":
        # Its position is where the log ends when it opens: before the rows.
        source = connector.binlog(
            server_id=7501,
            tables=[table],
            events=["insert"],
            batch_size=100,
            poll_interval_s=0.02,
        )
        await source.open()
    async with connector.engine.begin() as conn:
        for start in range(1, n + 1, 1000):
            rows = ", ".join(
                f"({i}, 'new', 'order {i} of the benchmark')"
                for i in range(start, min(start + 1000, n + 1))
            )
            await conn.execute(sa.text(f"INSERT INTO {table} (id, status, payload) VALUES {rows}"))
    if source is not None:
        pass
    elif source_kind == "incremental":
        source = connector.incremental(
            table=table, key="id", cursor=["id"], batch_size=1000, poll_interval_s=0.02
        )
    else:
        source = connector.table_queue(
            table=table,
            key="id",
            where="status = 'new'",
            claim={"status": "working"},
            ack={"status": "done"},
            nack={"status": "new"},
            batch_size=100,
            poll_interval_s=0.02,
        )
    app = OneStepApp("source-drain", shutdown_timeout_s=10.0)
    handled = 0

    @app.task(name="rows", source=source, concurrency=concurrency)
    async def handler(ctx, row):
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
    async with connector.engine.begin() as conn:
        await conn.execute(sa.text(f"DROP TABLE {table}"))
    await connector.close()
    return {
        "source": source_kind,
        "backend": backend,
        "n": n,
        "concurrency": concurrency,
        "seconds": seconds,
        "drain_per_s": round(n / seconds),
    }


if __name__ == "__main__":
    kind, url = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 5000
    concurrency = int(sys.argv[4]) if len(sys.argv) > 4 else 32
    print(json.dumps(asyncio.run(main(kind, url, n, concurrency))))
