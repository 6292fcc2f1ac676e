"""Peer burn-down: the reference Python onestep (tracked execution) on PostgreSQL or MariaDB/MySQL.

Adapted from /work/shared/bench/py_onestep_bench.py. Changes from the shared script:
  * backend selectable (BACKEND=postgres|mysql) - same code path, MySQL/MariaDB classes from onestep_sql.mysql;
  * a FRESH pair of tables per run (``peerbench_<id>_executions`` / ``..._attempts``), dropped at the end
    (also on failure), so earlier runs and other users' rows never sit in the indexes;
  * prints ONE JSON line (settings and /proc/loadavg included) instead of two text lines;
  * the drain end is detected by polling ``count(*) ... status = 'succeeded'`` like the shared script.

Workload (unchanged): submit N executions ONE BY ONE through ExecutionClient.submit (idempotency key on
each), then start ONE worker (OneStepApp + <Backend>ExecutionSource, in this same process) whose no-op
handler returns a small JSON result, and time until all N executions are 'succeeded'.

Run:  DSN=postgresql+psycopg://postgres@127.0.0.1:5432/test BACKEND=postgres python py_onestep_bench.py 2000
      DSN=mysql+asyncmy://root@127.0.0.1:3306/test      BACKEND=mysql    python py_onestep_bench.py 2000
"""
import asyncio
import json
import os
import sys
import time
import uuid
from importlib.metadata import version as pkg_version

from onestep import ExecutionClient, OneStepApp
from sqlalchemy import text

DSN = os.environ["DSN"]
BACKEND = os.environ.get("BACKEND", "postgres")
N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
CONCURRENCY = int(os.environ.get("CONCURRENCY", "32"))
BATCH_SIZE = int(os.environ.get("BATCH_SIZE", "100"))
POLL_INTERVAL_S = float(os.environ.get("POLL_INTERVAL_S", "0.05"))
RUN_ID = os.environ.get("BENCH_RUN_ID") or uuid.uuid4().hex[:10]
NS = f"bench-py-{RUN_ID}"
TABLE = f"peerbench_{RUN_ID}_executions"
ATTEMPTS = f"peerbench_{RUN_ID}_attempts"

if BACKEND == "postgres":
    from onestep_sql.postgres import PostgresExecutionBackend as Backend
    from onestep_sql.postgres import PostgresExecutionSource as Source
elif BACKEND == "mysql":
    from onestep_sql.mysql import MySQLExecutionBackend as Backend
    from onestep_sql.mysql import MySQLExecutionSource as Source
else:
    raise SystemExit(f"unknown BACKEND {BACKEND!r}")


CLK_TCK = os.sysconf("SC_CLK_TCK")
SERVER_COMM = ("postgres",) if BACKEND == "postgres" else ("mariadbd", "mysqld")


def server_cpu_s() -> float:
    """CPU seconds (user+sys) used so far by the database server's processes (incl. exited backends)."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        if comm in SERVER_COMM:
            fields = stat[stat.rindex(")") + 2:].split()
            # utime + stime, plus cutime + cstime: the postmaster's c-times hold the CPU of backends that
            # exited during the phase (connection churn), live backends are counted by their own u/stime
            total += int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    return total / CLK_TCK


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


async def drop_tables(backend) -> None:
    async with backend.engine.begin() as conn:
        await conn.execute(text(f"DROP TABLE IF EXISTS {ATTEMPTS}"))
        await conn.execute(text(f"DROP TABLE IF EXISTS {TABLE}"))


async def main() -> dict:
    backend = Backend(dsn=DSN, auto_create=True, table=TABLE, attempts_table=ATTEMPTS)
    client = ExecutionClient(backend, namespace=NS)
    load_before = loadavg()
    try:
        async with client:
            c0, d0 = time.process_time(), server_cpu_s()
            t0 = time.perf_counter()
            for i in range(N):
                await client.submit("noop", {"i": i}, idempotency_key=f"k{i}")
            t1 = time.perf_counter()
            c1, d1 = time.process_time(), server_cpu_s()
            load_after_submit = loadavg()

            app = OneStepApp("bench-worker", shutdown_timeout_s=5.0)
            source = Source(
                dsn=DSN, auto_create=False, table=TABLE, attempts_table=ATTEMPTS,
                namespace=NS, task_names=("noop",), batch_size=BATCH_SIZE,
                poll_interval_s=POLL_INTERVAL_S, lease_duration_s=90.0, heartbeat_interval_s=30.0,
                worker_id="bench-py",
            )

            @app.task(name="noop", source=source, concurrency=CONCURRENCY)
            async def noop(ctx, payload):
                return {"ok": payload["i"]}

            c2, d2 = time.process_time(), server_cpu_s()
            t2 = time.perf_counter()
            runner = asyncio.create_task(app.serve())
            async with backend.engine.connect() as conn:
                while True:
                    await asyncio.sleep(0.05)
                    if runner.done():  # worker died: surface its error instead of spinning
                        runner.result()
                        raise RuntimeError("worker exited before the drain finished")
                    done = (await conn.execute(text(
                        f"SELECT count(*) FROM {TABLE} WHERE namespace = :ns AND status = 'succeeded'"
                    ), {"ns": NS})).scalar_one()
                    await conn.commit()
                    if done >= N:
                        break
            t3 = time.perf_counter()
            c3, d3 = time.process_time(), server_cpu_s()
            load_after_drain = loadavg()
            app.request_shutdown()
            try:
                await asyncio.wait_for(runner, 10)
            except BaseException:
                runner.cancel()
            async with backend.engine.connect() as conn:
                attempts = (await conn.execute(text(f"SELECT count(*) FROM {ATTEMPTS}"))).scalar_one()
                server_version = (await conn.execute(text("SELECT version()"))).scalar_one()
    finally:
        await drop_tables(backend)
        await backend.close() if hasattr(backend, "close") else None

    return {
        "peer": "onestep-python-reference",
        "backend": "postgres" if BACKEND == "postgres" else "mariadb",
        "mode": "submit one-by-one with idempotency key; drain 1 worker",
        "n": N,
        "submit_per_s": round(N / (t1 - t0), 1),
        "drain_per_s": round(N / (t3 - t2), 1),
        "submit_s": round(t1 - t0, 3),
        "drain_s": round(t3 - t2, 3),
        "attempt_rows": attempts,
        # CPU seconds per wall second during each phase: this (client+worker) process, and the DB server
        "submit_cpu": {"bench_process": round((c1 - c0) / (t1 - t0), 2), "db_server": round((d1 - d0) / (t1 - t0), 2)},
        "drain_cpu": {"bench_process": round((c3 - c2) / (t3 - t2), 2), "db_server": round((d3 - d2) / (t3 - t2), 2)},
        "loadavg_before": load_before,
        "loadavg_after_submit": load_after_submit,
        "loadavg_after_drain": load_after_drain,
        "settings": {
            "onestep": pkg_version("onestep"), "onestep-sql": pkg_version("onestep-sql"),
            "sqlalchemy": pkg_version("SQLAlchemy"),
            "driver": "psycopg " + pkg_version("psycopg") if BACKEND == "postgres" else "asyncmy " + pkg_version("asyncmy"),
            "python": sys.version.split()[0], "server": server_version,
            "task_concurrency": CONCURRENCY, "batch_size": BATCH_SIZE, "poll_interval_s": POLL_INTERVAL_S,
            "lease_duration_s": 90.0, "heartbeat_interval_s": 30.0, "worker_processes": 1,
            "tables": "fresh per run, dropped after",
        },
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main())), flush=True)
