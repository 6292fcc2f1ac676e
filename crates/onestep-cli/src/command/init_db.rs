//! `onestep init-db --dsn URL`.

use onestep_core::execution::ExecutionBackend;
use onestep_sql::{BackendOptions, Dialect, SqlExecutionBackend};

use super::with_dialect;

/// Arguments of `init-db`.
#[derive(Debug, clap::Args)]
pub struct InitDbArgs {
    /// The database (a role allowed to create tables); `ONESTEP_DSN` when absent.
    #[arg(long, env = "ONESTEP_DSN", hide_env_values = true)]
    dsn: String,
    /// The executions table.
    #[arg(long, default_value = "onestep_executions")]
    table: String,
    /// The attempts table.
    #[arg(long, default_value = "onestep_execution_attempts")]
    attempts_table: String,
}

async fn init<D: Dialect>(args: &InitDbArgs) -> anyhow::Result<String> {
    let options = |auto_create| {
        BackendOptions::default()
            .with_table(args.table.clone())
            .with_attempts_table(args.attempts_table.clone())
            .with_auto_create(auto_create)
    };
    let check = SqlExecutionBackend::<D>::new(&args.dsn, options(false))?;
    let existed = check.open().await.is_ok();
    check.close().await?;
    if existed {
        return Ok(format!(
            "tables {} and {} already exist; nothing to do",
            args.table, args.attempts_table
        ));
    }
    let create = SqlExecutionBackend::<D>::new(&args.dsn, options(true))?;
    create.open().await?;
    create.close().await?;
    Ok(format!(
        "created {} and {} (with their indexes and constraints) on {}",
        args.table,
        args.attempts_table,
        create.connector().dsn()
    ))
}

/// 0 when the tables exist afterwards, 1 otherwise.
pub async fn init_db(args: InitDbArgs) -> u8 {
    let outcome: anyhow::Result<String> = with_dialect!(&args.dsn, init(&args));
    match outcome {
        Ok(message) => {
            println!("{message}");
            0
        }
        Err(e) => {
            eprintln!("onestep init-db: {e}");
            1
        }
    }
}
