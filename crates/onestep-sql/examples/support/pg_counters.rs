//! What a PostgreSQL drain cost the server, counted rather than timed: the transaction ids it
//! used (every transaction that wrote, each of which waits for its WAL flush at commit) and the
//! WAL bytes it wrote (the whole cluster's: other activity on the server counts too). Both are
//! read from the server's live positions (`pg_current_snapshot()`, `pg_current_wal_insert_lsn()`),
//! not from the statistics views, which sessions report up to seconds late. Unlike seconds, they
//! do not move with the machine's load, so two runs compare even on a noisy machine. Shared by
//! the burndown and ceiling examples (`#[path]`).
//!
//! On Linux it also counts CPU time from `/proc`: this process's, and the whole machine's busy
//! time (every process: the server's backends, this client, anything else running). On a machine
//! whose cores the drain saturates, the machine's CPU per execution is what bounds throughput,
//! and the difference between the two is, roughly, the server's share. (The host's steal is
//! not counted here: `cargo xtask bench` measures it around every run, `xtask/src/bench/steal.rs`.)

use serde_json::{Value, json};
use sqlx::Connection;

/// A snapshot of the counters.
#[derive(Debug, Clone)]
pub struct Counters {
    next_xid: i64,
    wal_lsn: String,
    cpu: Option<Cpu>,
}

/// CPU time so far, in clock ticks (`/proc`; `None` where it cannot be read).
#[derive(Debug, Clone, Copy)]
struct Cpu {
    /// This process: user and system time.
    process: u64,
    /// Every core of the machine: time not idle, not waiting for I/O and not stolen.
    machine_busy: u64,
}

impl Cpu {
    fn read() -> Option<Self> {
        // `/proc/self/stat`: fields 14 and 15 (utime, stime) count after the `)` that closes
        // the command name, which may itself hold spaces.
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        let after_name = own.rsplit_once(')')?.1;
        let fields: Vec<u64> = after_name
            .split_whitespace()
            .skip(11)
            .take(2)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        // `/proc/stat`'s first line: cpu user nice system idle iowait irq softirq steal …
        let all = std::fs::read_to_string("/proc/stat").ok()?;
        let ticks: Vec<u64> = all
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .map(str::parse)
            .collect::<Result<_, _>>()
            .ok()?;
        let [user, nice, system, _idle, _iowait, irq, softirq, ..] = ticks[..] else {
            return None;
        };
        Some(Self {
            process: fields.iter().sum(),
            machine_busy: user + nice + system + irq + softirq,
        })
    }
}

impl Counters {
    /// The counters now.
    pub async fn read(dsn: &str) -> Result<Self, sqlx::Error> {
        let mut conn = sqlx::PgConnection::connect(dsn).await?;
        let (next_xid, wal_lsn): (i64, String) = sqlx::query_as(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint, \
             pg_current_wal_insert_lsn()::text",
        )
        .fetch_one(&mut conn)
        .await?;
        conn.close().await?;
        Ok(Self {
            next_xid,
            wal_lsn,
            cpu: Cpu::read(),
        })
    }

    /// What happened between `self` and `later` for `n` executions, as JSON fields to
    /// [`merge`] into a run's line (`write_transactions_per_1000_executions`,
    /// `wal_bytes_per_execution`, and where `/proc` was read `client_cpu_us_per_execution` and
    /// `machine_cpu_us_per_execution`; a tick is 10 ms, so these need a drain of a second or
    /// more to mean much).
    pub async fn per_execution(
        &self,
        later: &Self,
        n: usize,
        dsn: &str,
    ) -> Result<Value, sqlx::Error> {
        let mut conn = sqlx::PgConnection::connect(dsn).await?;
        let wal_bytes: f64 =
            sqlx::query_scalar("SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::float8")
                .bind(&later.wal_lsn)
                .bind(&self.wal_lsn)
                .fetch_one(&mut conn)
                .await?;
        conn.close().await?;
        let n = n.max(1) as f64;
        let per_1000 = (later.next_xid - self.next_xid) as f64 * 1000.0 / n;
        let mut counted = json!({
            "write_transactions_per_1000_executions": (per_1000 * 10.0).round() / 10.0,
            "wal_bytes_per_execution": (wal_bytes / n).round(),
        });
        if let (Some(a), Some(b)) = (self.cpu, later.cpu) {
            // Clock ticks are 1/100 s on Linux (`USER_HZ`), so one tick is 10,000 µs.
            let us = |from: u64, to: u64| (to.saturating_sub(from) as f64 * 10_000.0 / n).round();
            merge(
                &mut counted,
                &json!({
                    "client_cpu_us_per_execution": us(a.process, b.process),
                    "machine_cpu_us_per_execution": us(a.machine_busy, b.machine_busy),
                }),
            );
        }
        Ok(counted)
    }
}

/// Adds the `counted` fields (from [`Counters::per_execution`]; nothing when it is not an
/// object) to the run's JSON `line`.
pub fn merge(line: &mut Value, counted: &Value) {
    if let (Some(line), Some(counted)) = (line.as_object_mut(), counted.as_object()) {
        line.extend(counted.clone());
    }
}
