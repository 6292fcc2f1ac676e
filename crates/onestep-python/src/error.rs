//! [`PythonError`]: why a Python process could not start or serve.

/// Why the Python worker processes could not start, import or answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PythonError {
    /// No interpreter was configured and none is on `PATH`.
    #[error(
        "no Python interpreter: set ONESTEP_PYTHON or --python, or put python (or python3) on PATH"
    )]
    NoInterpreter,
    /// The interpreter could not be started.
    #[error("cannot start the Python interpreter {interpreter}: {source}")]
    Spawn {
        /// The interpreter tried.
        interpreter: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The host started but did not become ready.
    #[error("the Python host did not start: {0}")]
    Startup(String),
    /// A handler ref could not be imported.
    #[error("cannot import {reference}: {error}")]
    Import {
        /// The ref, `pkg.mod:attr`.
        reference: String,
        /// The Python exception and its traceback.
        error: String,
    },
    /// The host broke the protocol.
    #[error("the Python host broke the protocol: {0}")]
    Protocol(String),
    /// The process ended.
    #[error("{0}")]
    Exited(String),
}
