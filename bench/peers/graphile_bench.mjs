// Peer burn-down: graphile-worker (npm) on PostgreSQL.
// Adapted from /work/shared/bench/graphile_bench.mjs. Changes from the shared script:
//   * a FRESH worker schema per run (graphile_peerbench_<id>), migrated at start and DROPped at the end
//     (also on failure), instead of the shared `graphile_worker` schema;
//   * graphile's own info logging is silenced (warnings/errors go to stderr) and ONE JSON line is printed;
//   * the drain end is "handler called N times AND the jobs table is empty" (completion = DELETE in graphile,
//     so an empty table means every completion is committed), exactly as the shared script did.
// Workload (unchanged): N no-op jobs inserted with utils.addJobs in chunks of 5,000, then drained by ONE
// runner (run()) in this same process; concurrency 24, pollInterval 1000 ms.
//   mode "default": graphile defaults (no local queue, completions unbatched).
//   mode "batch":   preset.worker.localQueue.size = 500, completeJobBatchDelay = 0, failJobBatchDelay = 0.
// Run: DATABASE_URL=postgres://postgres@127.0.0.1:5432/test node graphile_bench.mjs 20000 [default|batch]
import { readFileSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { run, makeWorkerUtils, Logger } from "graphile-worker";

const require = createRequire(import.meta.url);
const connectionString = process.env.DATABASE_URL;
const N = parseInt(process.argv[2] || "20000");
const mode = process.argv[3] === "batch" ? "batch" : "default";
const CONCURRENCY = parseInt(process.env.CONCURRENCY || "24");
const POLL_INTERVAL = parseInt(process.env.POLL_INTERVAL || "1000");
const schema = `graphile_peerbench_${process.env.BENCH_RUN_ID || `${process.pid}_${Date.now().toString(36)}`}`;
const loadavg = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
// CPU seconds (user+sys) used so far by the processes named "postgres" (the DB server, incl. exited backends)
const CLK_TCK = 100;
const serverCpuS = () => {
  let ticks = 0;
  for (const pid of readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    let stat; try { stat = readFileSync(`/proc/${pid}/stat`, "utf8"); } catch { continue; }
    if (stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")) !== "postgres") continue;
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // utime + stime + cutime + cstime (the postmaster's c-times hold the CPU of backends that exited)
    ticks += parseInt(f[11]) + parseInt(f[12]) + parseInt(f[13]) + parseInt(f[14]);
  }
  return ticks / CLK_TCK;
};
// The whole machine's busy CPU ticks (/proc/stat's first line: user, nice, system, irq, softirq).
const machineBusyTicks = () => {
  const f = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
  return f[0] + f[1] + f[2] + f[5] + f[6];
};
// The server's next transaction id and WAL insert position, as the burndown's pg_counters reads them.
const serverCounters = () => utils.withPgClient(c => c.query(
  "select pg_snapshot_xmax(pg_current_snapshot())::text::bigint as xid, pg_current_wal_insert_lsn()::text as lsn"))
  .then(({ rows: [r] }) => ({ xid: BigInt(r.xid), lsn: r.lsn }));
const lsnBytes = (lsn) => { const [hi, lo] = lsn.split("/"); return BigInt("0x" + hi) * 4294967296n + BigInt("0x" + lo); };
const cpuS = () => { const u = process.cpuUsage(); return (u.user + u.system) / 1e6; };
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`[graphile ${level}] ${message}`);
});

const utils = await makeWorkerUtils({ connectionString, schema, logger });
let runner = null;
let result;
try {
  await utils.migrate();
  const loadBefore = loadavg();
  const c0 = cpuS(), d0 = serverCpuS();
  const t0 = performance.now();
  const specs = [];
  for (let i = 0; i < N; i++) specs.push({ identifier: "noop", payload: { i } });
  for (let i = 0; i < N; i += 5000) await utils.addJobs(specs.slice(i, i + 5000));
  const t1 = performance.now();
  const c1 = cpuS(), d1 = serverCpuS();
  const loadAfterSubmit = loadavg();

  let done = 0; let resolveDone; const allDone = new Promise(r => resolveDone = r);
  const opts = { connectionString, schema, logger, concurrency: CONCURRENCY, noHandleSignals: true,
    pollInterval: POLL_INTERVAL,
    taskList: { noop: async (payload) => { if (++done === N) resolveDone(); return { ok: payload.i }; } } };
  if (mode === "batch") Object.assign(opts, { preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } } });
  const before = await serverCounters();
  const c2 = cpuS(), d2 = serverCpuS(), m2 = machineBusyTicks();
  const t2 = performance.now();
  runner = await run(opts);
  await allDone;
  // wait for completions to flush (completed jobs are deleted)
  while (true) {
    const { rows } = await utils.withPgClient(c => c.query(`select count(*)::int n from "${schema}"._private_jobs`));
    if (rows[0].n === 0) break;
    await new Promise(r => setTimeout(r, 20));
  }
  const t3 = performance.now();
  const c3 = cpuS(), d3 = serverCpuS(), m3 = machineBusyTicks();
  const after = await serverCounters();
  const loadAfterDrain = loadavg();
  await runner.stop(); runner = null;
  const { rows: [{ v, sc }] } = await utils.withPgClient(c => c.query("select version() v, current_setting('synchronous_commit') sc"));
  result = {
    peer: "graphile-worker", backend: "postgres", mode, n: N,
    submit_per_s: +(N / ((t1 - t0) / 1000)).toFixed(1),
    drain_per_s: +(N / ((t3 - t2) / 1000)).toFixed(1),
    submit_s: +((t1 - t0) / 1000).toFixed(3), drain_s: +((t3 - t2) / 1000).toFixed(3),
    // CPU seconds per wall second during each phase: this (client+worker) process, and the DB server
    submit_cpu: { bench_process: +((c1 - c0) / ((t1 - t0) / 1000)).toFixed(2), db_server: +((d1 - d0) / ((t1 - t0) / 1000)).toFixed(2) },
    drain_cpu: { bench_process: +((c3 - c2) / ((t3 - t2) / 1000)).toFixed(2), db_server: +((d3 - d2) / ((t3 - t2) / 1000)).toFixed(2) },
    // What the drain cost per job, counted as the burndown and ceiling examples count it.
    write_transactions_per_1000_executions: +(Number(after.xid - before.xid) * 1000 / N).toFixed(1),
    wal_bytes_per_execution: Math.round(Number(lsnBytes(after.lsn) - lsnBytes(before.lsn)) / N),
    client_cpu_us_per_execution: Math.round((c3 - c2) * 1e6 / N),
    machine_cpu_us_per_execution: Math.round((m3 - m2) / CLK_TCK * 1e6 / N),
    drain_shape: mode === "batch"
      ? `1 process, concurrency ${CONCURRENCY}, local queue 500, batched completions`
      : `1 process, concurrency ${CONCURRENCY}`,
    loadavg_before: loadBefore, loadavg_after_submit: loadAfterSubmit, loadavg_after_drain: loadAfterDrain,
    settings: {
      "graphile-worker": require("graphile-worker/package.json").version, pg: require("pg/package.json").version,
      node: process.version, server: v, synchronous_commit: sc,
      submit: "utils.addJobs, chunks of 5000", concurrency: CONCURRENCY, pollInterval_ms: POLL_INTERVAL,
      maxPoolSize: 10,
      localQueue_size: mode === "batch" ? 500 : -1,
      completeJobBatchDelay_ms: mode === "batch" ? 0 : -1, failJobBatchDelay_ms: mode === "batch" ? 0 : -1,
      worker_processes: 1, schema: "fresh per run, dropped after",
    },
  };
} finally {
  if (runner) await runner.stop().catch(() => {});
  await utils.withPgClient(c => c.query(`drop schema if exists "${schema}" cascade`));
  await utils.release();
}
console.log(JSON.stringify(result));
