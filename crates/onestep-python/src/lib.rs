//! # onestep-python
//!
//! Python handlers on the Rust onestep runtime. A YAML `handler: {ref: app.handlers:run_agent}`
//! that names no Rust handler runs the user's Python function, as the reference would, in a
//! [`PythonPool`] of long-lived Python processes started with the user's interpreter:
//!
//! * the module is imported once per process; the function is called per delivery as
//!   `fn(ctx, payload, **params)`, sync or async;
//! * a tracked execution's payload and result cross in the reference's tagged codec, so Python
//!   sees `datetime`, `UUID`, `Decimal`, tuples and sets exactly as under the reference;
//! * `ctx.config`, `ctx.task_config`, `ctx.current` (body, meta, attempts), `ctx.logger`,
//!   `ctx.emit`, `ctx.state` and `ctx.metrics` behave as the reference's `TaskContext`;
//!   `ctx.cancelled` (a `threading.Event`) is set on cancellation, and an async function's task
//!   is cancelled;
//! * the task's timeout, retries, leases and heartbeats stay in Rust, which keeps the lease
//!   alive while Python runs;
//! * a crashed process fails its calls with `PythonWorkerExited` (retried per the task's
//!   policy) and is started again.
//!
//! Nothing is installed into the user's environment: the host script ships inside this crate
//! and needs only the standard library. The protocol is described in `host.py`.

mod call;
mod config;
mod error;
mod frame;
mod pool;
mod process;

pub use call::CallbackArg;
pub use config::PythonConfig;
pub use error::PythonError;
pub use pool::{PythonCallback, PythonHandler, PythonPool, RefCheck};

/// The crate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The host script run by every Python process (for reading; it is passed with `python -c`).
pub const HOST_SCRIPT: &str = process::HOST_SCRIPT;
