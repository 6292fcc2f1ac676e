//! # onestep-cli
//!
//! The `onestep` command: `check` and `run` YAML-configured workers, `init-db` the execution
//! tables, inspect and manage executions (`executions stats|list|get|attempts|cancel|result|prune`),
//! and list resource types (`catalog`).
//!
//! Handlers in YAML are references resolved against a registry. The stock binary registers
//! `onestep:echo`, `onestep:sleep`, `onestep:fail` and `onestep:exec`; any other
//! `package.module:attr` ref runs the user's Python function (`onestep-python`). Your own binary
//! adds Rust handlers and gets every subcommand:
//!
//! ```no_run
//! use onestep_core::{TaskContext, TaskError};
//!
//! async fn run_agent(_ctx: TaskContext, input: serde_json::Value) -> Result<serde_json::Value, TaskError> {
//!     Ok(serde_json::json!({"answer": input["question"]}))
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     onestep_cli::Cli::new().handler("app.handlers:run_agent", run_agent).run()
//! }
//! ```

pub mod builtin;
pub mod command;
pub mod config;
pub mod logging;
pub mod probes;
pub mod registry;
#[cfg(feature = "otel")]
pub mod telemetry;

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use onestep_core::{TaskContext, TaskError};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use registry::Registry;

/// The `onestep` command with a handler registry.
#[derive(Clone)]
pub struct Cli {
    registry: Registry,
}

impl Default for Cli {
    fn default() -> Self {
        Self::new()
    }
}

impl Cli {
    /// The command with the built-in handlers and resource types.
    pub fn new() -> Self {
        Self {
            registry: Registry::with_builtins(),
        }
    }

    /// Registers `handler` under `reference` (as written in YAML `handler.ref`).
    pub fn handler<I, O, E, F, Fut>(mut self, reference: &str, handler: F) -> Self
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Fn(TaskContext, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, E>> + Send + 'static,
    {
        self.registry.handler(reference, handler);
        self
    }

    /// Registers a handler that also receives YAML `handler.params`.
    pub fn handler_with_params<I, O, E, F, Fut>(mut self, reference: &str, handler: F) -> Self
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<TaskError> + Send + 'static,
        F: Fn(TaskContext, I, Arc<Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, E>> + Send + 'static,
    {
        self.registry.handler_with_params(reference, handler);
        self
    }

    /// Registers a callback YAML names as a hook, an emit `transform` or a route `when`
    /// (see [`Registry::callback`] for the arguments each gets).
    pub fn callback<F, Fut>(mut self, reference: &str, callback: F) -> Self
    where
        F: Fn(Option<TaskContext>, Vec<Value>, Arc<Value>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, TaskError>> + Send + 'static,
    {
        self.registry.callback(reference, callback);
        self
    }

    /// Registers a resource type.
    pub fn resource_type<T: onestep_core::catalog::ResourceType>(mut self, rtype: T) -> Self {
        self.registry.add_resource_type(rtype);
        self
    }

    /// Adds a crate's resource types: `Cli::new().resource_types(my_plugin::catalog::register)`.
    pub fn resource_types(
        mut self,
        register: impl FnOnce(&mut onestep_core::catalog::Catalog),
    ) -> Self {
        register(self.registry.catalog_mut());
        self
    }

    /// The registry.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Parses the process arguments and runs the command; the exit code is the command's.
    pub fn run(self) -> ExitCode {
        self.run_from(std::env::args_os())
    }

    /// Parses `args` (the first is the program name) and runs the command.
    pub fn run_from<I, T>(self, args: I) -> ExitCode
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let args = match command::Args::try_parse_from(command::file_as_run(args)) {
            Ok(args) => args,
            Err(err) => {
                let _ = err.print();
                return ExitCode::from(if err.use_stderr() { 2 } else { 0 });
            }
        };
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(err) => {
                eprintln!("onestep: cannot start the async runtime: {err}");
                return ExitCode::from(1);
            }
        };
        let code = runtime.block_on(command::dispatch(args, &self.registry));
        // The command has finished (a worker has stopped gracefully and closed its resources),
        // so nothing the runtime still runs is needed: blocking work left behind (a DNS lookup
        // of a reconnect, a child's wait) must not hold the exit back. Dropping the runtime
        // would wait for it.
        runtime.shutdown_background();
        ExitCode::from(code)
    }
}

/// The onestep crates in this binary and their versions, dependencies first. API and worker
/// processes print these (`onestep --version`) so a deployment can check they match.
pub fn versions() -> [(&'static str, &'static str); 5] {
    [
        ("onestep-core", onestep_core::VERSION),
        ("onestep-sql", onestep_sql::VERSION),
        ("onestep-http", onestep_http::VERSION),
        ("onestep-python", onestep_python::VERSION),
        ("onestep-cli", env!("CARGO_PKG_VERSION")),
    ]
}

/// The versions of the crates in this binary, as `onestep --version` prints them.
pub fn version_text() -> String {
    let crates: Vec<String> = versions().iter().map(|(n, v)| format!("{n} {v}")).collect();
    format!("{} ({})", env!("CARGO_PKG_VERSION"), crates.join(", "))
}
