//! `onestep init-db --dsn URL [--state-table NAME] [--cursor-table NAME]`.

use onestep_core::execution::ExecutionBackend;
use onestep_sql::state::{SqlStateStore, StateTable};
use onestep_sql::{BackendOptions, Dialect, SqlConnector, SqlExecutionBackend};

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
    /// Also create this state table (the reference's columns: state_key, state_value,
    /// updated_at), for state stores declared with `auto_create: false`.
    #[arg(long)]
    state_table: Option<String>,
    /// Also create this cursor table (cursor_key, cursor_value, updated_at).
    #[arg(long)]
    cursor_table: Option<String>,
}

/// Creates the state and cursor tables asked for; one line each.
async fn init_stores<D: Dialect>(args: &InitDbArgs) -> anyhow::Result<Vec<String>> {
    let connector = SqlConnector::<D>::new(&args.dsn)?;
    let mut lines = Vec::new();
    let asked = [
        (
            args.state_table.as_ref(),
            StateTable::state(),
            "state_table",
        ),
        (
            args.cursor_table.as_ref(),
            StateTable::cursor(),
            "cursor_table",
        ),
    ];
    for (name, defaults, flag) in asked {
        let Some(name) = name else { continue };
        let table = defaults.with_table(name);
        let store = SqlStateStore::new(connector.clone(), table).map_err(|e| match e {
            onestep_core::Error::InvalidArgument { message, .. } => {
                anyhow::anyhow!("--{} {message}", flag.replace('_', "-"))
            }
            other => other.into(),
        })?;
        store.create_table().await?;
        lines.push(format!("{name} exists (created when missing)"));
    }
    connector.close().await;
    Ok(lines)
}

async fn init<D: Dialect>(args: &InitDbArgs) -> anyhow::Result<String> {
    let options = |auto_create| {
        BackendOptions::default()
            .with_table(args.table.clone())
            .with_attempts_table(args.attempts_table.clone())
            .with_auto_create(auto_create)
    };
    let stores = init_stores::<D>(args).await?;
    let check = SqlExecutionBackend::<D>::new(&args.dsn, options(false))?;
    let existed = check.open().await.is_ok();
    check.close().await?;
    let executions = if existed {
        format!(
            "tables {} and {} already exist; nothing to do",
            args.table, args.attempts_table
        )
    } else {
        let create = SqlExecutionBackend::<D>::new(&args.dsn, options(true))?;
        create.open().await?;
        create.close().await?;
        format!(
            "created {} and {} (with their indexes and constraints) on {}",
            args.table,
            args.attempts_table,
            create.connector().dsn()
        )
    };
    Ok(std::iter::once(executions)
        .chain(stores)
        .collect::<Vec<_>>()
        .join("\n"))
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
