//! `onestep executions submit|stats|list|get|attempts|cancel|result|prune`.

use clap::Subcommand;
use onestep_core::execution::{
    Execution, ExecutionClient, ExecutionStatus, SubmitOptions, client::parse_id,
};
use onestep_sql::{BackendOptions, Dialect, SqlExecutionBackend};
use serde_json::{Value, json};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::with_dialect;

/// Arguments of `executions`.
#[derive(Debug, clap::Args)]
pub struct ExecutionsArgs {
    /// The database; `ONESTEP_DSN` when absent.
    #[arg(long, env = "ONESTEP_DSN", hide_env_values = true, global = true)]
    dsn: Option<String>,
    /// The namespace (required except for `stats` and `prune`, where it narrows to one namespace).
    #[arg(long, global = true)]
    namespace: Option<String>,
    /// The executions table.
    #[arg(long, default_value = "onestep_executions", global = true)]
    table: String,
    /// The attempts table.
    #[arg(long, default_value = "onestep_execution_attempts", global = true)]
    attempts_table: String,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, Clone, Subcommand)]
enum Action {
    /// Submit an execution (plain JSON, as the HTTP API takes it); prints its id and status.
    ///
    /// Example: `onestep executions submit --namespace demo report '{"month": "2026-11"}'`
    Submit {
        /// The task name.
        task: String,
        /// The payload, as JSON.
        #[arg(default_value = "null")]
        payload: String,
        /// The metadata, as a JSON object.
        #[arg(long)]
        metadata: Option<String>,
        /// The idempotency key: submitting again with the same key and content returns the same
        /// execution.
        #[arg(long)]
        key: Option<String>,
        /// Seconds before a worker may claim it.
        #[arg(long)]
        delay_s: Option<f64>,
    },
    /// Counts per status with the oldest submission of each (what to alert on).
    ///
    /// Example: `onestep executions stats --namespace billing`
    Stats,
    /// Newest first, with filters and a cursor.
    ///
    /// Example: `onestep executions list --namespace billing --status failed --limit 20`
    List {
        /// Only this task.
        #[arg(long)]
        task: Option<String>,
        /// Only this status.
        #[arg(long)]
        status: Option<String>,
        /// Page size (1..200).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// The `next_cursor` of the previous page.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// One execution, with the last progress its handler reported.
    Get {
        /// The execution id.
        id: String,
    },
    /// The attempts history of one execution.
    Attempts {
        /// The execution id.
        id: String,
    },
    /// Cancel: queued/retrying end at once, running ones stop cooperatively.
    Cancel {
        /// The execution id.
        id: String,
        /// Why (at most 500 characters).
        #[arg(long)]
        reason: Option<String>,
    },
    /// The result of a succeeded execution (exit 1 otherwise, with the reason).
    Result {
        /// The execution id.
        id: String,
    },
    /// Delete terminal executions (and their attempts) finished before a time.
    ///
    /// Example: `onestep executions prune --finished-before 30d --dry-run`
    Prune {
        /// An age (`30d`, `12h`, `90m`, `3600s`) or an RFC 3339 timestamp.
        #[arg(long)]
        finished_before: String,
        /// Rows deleted per transaction.
        #[arg(long, default_value_t = 500)]
        batch: usize,
        /// Only count what would be deleted.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Parses `30d` / `12h` / `90m` / `3600s` (before now) or an RFC 3339 timestamp.
pub fn parse_before(text: &str, now: OffsetDateTime) -> anyhow::Result<OffsetDateTime> {
    let t = text.trim();
    if let Ok(at) = OffsetDateTime::parse(t, &Rfc3339) {
        return Ok(at);
    }
    let (number, unit) = t.split_at(
        t.find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(t.len()),
    );
    let n: f64 = number.parse().map_err(|_| {
        anyhow::anyhow!(
            "--finished-before expected an age like 30d or an RFC 3339 time, got {text:?}"
        )
    })?;
    let seconds = match unit {
        "d" => n * 86_400.0,
        "h" => n * 3_600.0,
        "m" => n * 60.0,
        "s" | "" => n,
        other => anyhow::bail!("--finished-before unit {other:?} is not one of d, h, m, s"),
    };
    Ok(now - time::Duration::seconds_f64(seconds))
}

/// Parses a command-line JSON argument and encodes it as the HTTP API does: plain JSON, read as
/// Python's `json.loads` reads it (an object with a `"$onestep"` key is a dict, not a tag).
fn plain_json(field: &str, text: &str) -> anyhow::Result<Value> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| anyhow::anyhow!("{field} must be JSON ({e}), got {text:?}"))?;
    Ok(onestep_core::execution::stored::encode_plain_storable(
        field, &value,
    )?)
}

/// `text` safe to print on a terminal: control characters (which a row written by another
/// program may hold) shown as `\u{1b}` escapes instead of being sent raw.
pub fn printable(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_owned();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                format!("\\u{{{:x}}}", u32::from(c))
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn time_text(t: Option<OffsetDateTime>) -> String {
    t.and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| "-".into())
}

fn view(e: &Execution) -> Value {
    serde_json::to_value(e).unwrap_or(Value::Null)
}

fn table(e: &[Execution]) -> String {
    let mut out = format!(
        "{:<36}  {:<16}  {:<20}  {:>8}  {}\n",
        "id", "status", "task", "attempts", "created_at"
    );
    for x in e {
        out.push_str(&format!(
            "{:<36}  {:<16}  {:<20}  {:>8}  {}\n",
            x.id,
            x.status.as_str(),
            printable(&x.task_name),
            x.attempts,
            time_text(Some(x.created_at))
        ));
    }
    out
}

async fn run<D: Dialect>(args: &ExecutionsArgs, dsn: &str) -> anyhow::Result<(String, u8)> {
    let options = BackendOptions::default()
        .with_table(args.table.clone())
        .with_attempts_table(args.attempts_table.clone())
        .with_auto_create(false);
    let backend = SqlExecutionBackend::<D>::new(dsn, options)?;
    let namespace = || {
        args.namespace
            .clone()
            .ok_or_else(|| anyhow::anyhow!("--namespace is required for this command"))
    };
    let client = || -> anyhow::Result<ExecutionClient<SqlExecutionBackend<D>>> {
        Ok(ExecutionClient::new(backend.clone(), &namespace()?)?)
    };
    let json = args.json;
    Ok(match &args.action {
        Action::Submit {
            task,
            payload,
            metadata,
            key,
            delay_s,
        } => {
            let payload = plain_json("payload", payload)?;
            let metadata = match metadata {
                None => serde_json::Map::new(),
                Some(text) => match plain_json("metadata", text)? {
                    Value::Object(map) => map,
                    _ => anyhow::bail!("--metadata must be a JSON object"),
                },
            };
            let mut options = SubmitOptions::default().metadata(metadata);
            options.idempotency_key = key.clone();
            options.delay_s = *delay_s;
            let e = client()?.submit(task, &payload, options).await?;
            if json {
                (serde_json::to_string_pretty(&view(&e))?, 0)
            } else {
                (format!("{} {}", e.id, e.status), 0)
            }
        }
        Action::Stats => {
            let stats = backend.stats(args.namespace.as_deref()).await?;
            if json {
                let v: Vec<Value> = stats
                    .iter()
                    .map(|s| json!({"status": s.status.as_str(), "count": s.count, "oldest_created_at": s.oldest_created_at.map(|t| time_text(Some(t)))}))
                    .collect();
                (serde_json::to_string_pretty(&v)?, 0)
            } else {
                let mut out = format!(
                    "{:<16}  {:>8}  {}\n",
                    "status", "count", "oldest created_at"
                );
                for s in stats {
                    out.push_str(&format!(
                        "{:<16}  {:>8}  {}\n",
                        s.status.as_str(),
                        s.count,
                        time_text(s.oldest_created_at)
                    ));
                }
                (out, 0)
            }
        }
        Action::List {
            task,
            status,
            limit,
            cursor,
        } => {
            let status = status
                .as_deref()
                .map(str::parse::<ExecutionStatus>)
                .transpose()?;
            let page = client()?
                .list(task.as_deref(), status, *limit, cursor.as_deref())
                .await?;
            if json {
                let v = json!({"items": page.items.iter().map(view).collect::<Vec<_>>(), "next_cursor": page.next_cursor});
                (serde_json::to_string_pretty(&v)?, 0)
            } else {
                let mut out = table(&page.items);
                if let Some(c) = page.next_cursor {
                    out.push_str(&format!("next page: --cursor {c}\n"));
                }
                (out, 0)
            }
        }
        Action::Get { id } => match client()?.get(parse_id(id)?).await? {
            Some(e) => {
                let mut shown = view(&e);
                shown["progress"] = client()?.progress(e.id).await?.unwrap_or(Value::Null);
                (serde_json::to_string_pretty(&shown)?, 0)
            }
            None => (
                format!("execution {id} was not found in namespace {}", namespace()?),
                1,
            ),
        },
        Action::Attempts { id } => {
            let id = parse_id(id)?;
            if client()?.get(id).await?.is_none() {
                return Ok((
                    format!("execution {id} was not found in namespace {}", namespace()?),
                    1,
                ));
            }
            let attempts = backend.attempts(id).await?;
            let rows: Vec<Value> = attempts
                .iter()
                .map(|a| {
                    json!({"attempt_no": a.attempt_no, "id": a.id.to_string(), "status": a.status.as_str(), "worker_id": a.worker_id,
                           "started_at": time_text(Some(a.started_at)), "heartbeat_at": time_text(Some(a.heartbeat_at)),
                           "finished_at": time_text(a.finished_at), "error": a.error})
                })
                .collect();
            if json {
                (serde_json::to_string_pretty(&rows)?, 0)
            } else {
                let mut out = format!(
                    "{:>3}  {:<10}  {:<20}  {:<32}  {}\n",
                    "no", "status", "worker", "started_at", "finished_at"
                );
                for a in &attempts {
                    out.push_str(&format!(
                        "{:>3}  {:<10}  {:<20}  {:<32}  {}\n",
                        a.attempt_no,
                        a.status.as_str(),
                        printable(&a.worker_id),
                        time_text(Some(a.started_at)),
                        time_text(a.finished_at)
                    ));
                }
                (out, 0)
            }
        }
        Action::Cancel { id, reason } => {
            match client()?.cancel(parse_id(id)?, reason.as_deref()).await? {
                Some(e) if json => (serde_json::to_string_pretty(&view(&e))?, 0),
                Some(e) => (format!("{} is {}", e.id, e.status), 0),
                None => (
                    format!("execution {id} was not found in namespace {}", namespace()?),
                    1,
                ),
            }
        }
        Action::Result { id } => match client()?.result::<Value>(parse_id(id)?).await {
            Ok(v) => (serde_json::to_string_pretty(&v)?, 0),
            Err(e) => {
                let detail = e
                    .execution()
                    .and_then(|x| x.error.clone())
                    .map(|d| format!(" ({}: {})", d.kind, d.exception_type))
                    .unwrap_or_default();
                (format!("{e}{detail}"), 1)
            }
        },
        Action::Prune {
            finished_before,
            batch,
            dry_run,
        } => {
            let before = parse_before(finished_before, OffsetDateTime::now_utc())?;
            let n = backend
                .prune(args.namespace.as_deref(), before, *batch, *dry_run)
                .await?;
            let verb = if *dry_run { "would delete" } else { "deleted" };
            (
                format!(
                    "{verb} {n} terminal execution(s) finished before {}",
                    time_text(Some(before))
                ),
                0,
            )
        }
    })
}

/// Runs the action; 1 when it fails or finds nothing.
pub async fn executions(args: ExecutionsArgs) -> u8 {
    let Some(dsn) = args.dsn.clone() else {
        eprintln!("onestep executions: --dsn (or ONESTEP_DSN) is required");
        return 2;
    };
    let outcome: anyhow::Result<(String, u8)> = with_dialect!(&dsn, run(&args, &dsn));
    match outcome {
        Ok((text, code)) => {
            if code == 0 {
                println!("{}", text.trim_end());
            } else {
                eprintln!("{}", text.trim_end());
            }
            code
        }
        Err(e) => {
            eprintln!("onestep executions: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn control_characters_are_printed_escaped() {
        assert_eq!(printable("report"), "report");
        assert_eq!(printable("a\u{1b}[2Jb\nc"), "a\\u{1b}[2Jb\\u{a}c");
    }

    #[test]
    fn ages_and_timestamps_parse_for_prune() {
        let now = datetime!(2026-02-01 00:00 UTC);
        assert_eq!(
            parse_before("30d", now).unwrap(),
            datetime!(2026-01-02 00:00 UTC)
        );
        assert_eq!(
            parse_before("12h", now).unwrap(),
            datetime!(2026-01-31 12:00 UTC)
        );
        assert_eq!(
            parse_before("2025-12-31T00:00:00+08:00", now).unwrap(),
            datetime!(2025-12-30 16:00 UTC)
        );
        assert!(parse_before("soon", now).is_err());
        assert!(
            parse_before("3w", now)
                .unwrap_err()
                .to_string()
                .contains("unit")
        );
    }
}
