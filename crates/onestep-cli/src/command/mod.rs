//! The subcommands. Exit codes: 0 ok, 1 problems found or runtime failure, 2 could not load.

mod catalog;
mod check;
mod executions;
mod init;
mod init_db;
mod quickstart;
mod render;
mod run;
mod serve;
mod task;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::registry::Registry;

static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(crate::version_text);

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(name = "onestep", version = VERSION.as_str(), about = "Run and manage onestep workers and tracked executions")]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the app a YAML file describes until SIGINT/SIGTERM.
    ///
    /// Example: `onestep run worker.yaml --log-level debug`
    Run(run::RunArgs),
    /// Validate a YAML file; `--strict` reports every problem with its path, line and column.
    ///
    /// Example: `onestep check --strict worker.yaml`
    Check(check::CheckArgs),
    /// Create the execution tables once, with a role allowed to run DDL (idempotent).
    ///
    /// Example: `onestep init-db --dsn postgres://migrator@db/app`
    InitDb(init_db::InitDbArgs),
    /// Submit, inspect and manage executions in a database: counts per status, lists, one
    /// execution with its attempts, its result, cancel, prune.
    ///
    /// Example: `onestep executions stats --dsn postgres://app@db/app --namespace billing`
    Executions(executions::ExecutionsArgs),
    /// Serve the HTTP executions API (its own process; workers run separately).
    ///
    /// Example: `onestep serve --dsn postgres://app@db/app --namespace agents --allow-task run_agent`
    Serve(serve::ServeArgs),
    /// The whole system on embedded SQLite in one process: API, worker, demo tasks.
    ///
    /// Example: `onestep quickstart --tour`
    Quickstart(quickstart::QuickstartArgs),
    /// List resource types and their fields.
    ///
    /// Example: `onestep catalog --json`
    Catalog(catalog::CatalogArgs),
    /// Create a working project: `worker.yaml`, a Python package with a demo handler,
    /// `pyproject.toml` and `README.md` (the reference's `onestep init` files).
    ///
    /// Example: `onestep init my-worker --template webhook`
    Init(init::InitArgs),
    /// Run one delivery of one task locally: `task run` with a JSON payload file, `task replay`
    /// with a captured failure (`app.failure_capture`). Sinks are recorded, not sent, unless
    /// `--send`.
    ///
    /// Example: `onestep task run worker.yaml --task report --input payload.json`
    Task(task::TaskArgs),
    /// Print the worker's topology (sources, tasks, sinks) as a Mermaid flowchart, as the
    /// reference's `onestep render` does.
    ///
    /// Example: `onestep render worker.yaml > worker.mmd`
    Render(render::RenderArgs),
}

/// `onestep FILE …` means `onestep run FILE …`, as in the reference: a first argument that is
/// neither an option nor a subcommand is the file to run.
pub fn file_as_run<I, T>(args: I) -> Vec<std::ffi::OsString>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let mut args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let Some(first) = args.get(1).and_then(|a| a.to_str()) else {
        return args;
    };
    let command = <Args as clap::CommandFactory>::command();
    let is_subcommand = first == "help"
        || command
            .get_subcommands()
            .any(|c| c.get_name() == first || c.get_all_aliases().any(|a| a == first));
    if !first.starts_with('-') && !is_subcommand {
        args.insert(1, "run".into());
    }
    args
}

/// Options shared by commands that load a YAML file.
#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// The YAML file (`apiVersion: onestep/v1alpha1`, `kind: App`).
    pub file: PathBuf,
    /// A `.env` file (wins over `app.env_file` and a `.env` next to the YAML).
    #[arg(long)]
    pub env_file: Option<PathBuf>,
    /// Fail when a `${VAR}` without default is not set.
    #[arg(long)]
    pub strict_env: bool,
    /// The Python interpreter for handler refs that name no Rust handler (default: `python`,
    /// else `python3`, on PATH).
    #[arg(long, env = "ONESTEP_PYTHON", value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// How many long-lived Python processes serve those handlers.
    #[arg(long, env = "ONESTEP_PYTHON_PROCESSES", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub python_processes: u16,
}

impl LoadArgs {
    fn options(&self) -> crate::config::LoadOptions {
        crate::config::LoadOptions {
            env_file: self.env_file.clone(),
            strict_env: self.strict_env,
        }
    }

    /// Loads and validates the file (never strict): the spec, or the exit code after printing
    /// why not (2 when it cannot be loaded, `problems_exit` when it has problems).
    fn spec(&self, registry: &Registry, problems_exit: u8) -> Result<crate::config::AppSpec, u8> {
        let doc = crate::config::load(&self.file, &self.options()).map_err(|e| {
            eprintln!("onestep: {e}");
            2
        })?;
        crate::config::spec::validate(&doc, registry, false).map_err(|problems| {
            eprintln!("{problems}");
            problems_exit
        })
    }

    fn python_config(&self) -> onestep_python::PythonConfig {
        crate::config::python::python_config(
            &self.file,
            self.python.clone(),
            usize::from(self.python_processes),
        )
    }
}

/// Runs the parsed command.
pub async fn dispatch(args: Args, registry: &Registry) -> u8 {
    match args.command {
        Command::Run(a) => run::run(a, registry).await,
        Command::Check(a) => check::check(a, registry).await,
        Command::InitDb(a) => init_db::init_db(a).await,
        Command::Executions(a) => executions::executions(a).await,
        Command::Catalog(a) => catalog::catalog(a, registry),
        Command::Render(a) => render::render(&a, registry),
        Command::Init(a) => init::init(&a),
        Command::Task(a) => task::task(a, registry).await,
        Command::Serve(a) => serve::run(a).await,
        Command::Quickstart(a) => quickstart::run(a).await,
    }
}

/// Calls `$body` with the dialect type `D` matching the DSN's scheme.
macro_rules! with_dialect {
    ($dsn:expr, $f:ident ( $($arg:expr),* )) => {{
        match onestep_sql::dsn::Dsn::parse($dsn).map(|d| d.scheme().to_string()) {
            Ok(s) if s == "postgres" => $f::<onestep_sql::postgres::Postgres>($($arg),*).await,
            Ok(s) if s == "mysql" => $f::<onestep_sql::mysql::MySql>($($arg),*).await,
            Ok(s) if s == "sqlite" => $f::<onestep_sql::sqlite::Sqlite>($($arg),*).await,
            Ok(s) => Err(anyhow::anyhow!("unsupported dsn scheme {s:?}")),
            Err(e) => Err(anyhow::anyhow!("--dsn: {e}")),
        }
    }};
}
pub(crate) use with_dialect;
