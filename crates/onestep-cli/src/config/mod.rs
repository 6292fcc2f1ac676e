//! The YAML worker configuration (`apiVersion: onestep/v1alpha1`, `kind: App`): loading,
//! environment interpolation, validation into a typed [`AppSpec`], and building an app.

pub mod build;
pub mod callable;
pub mod callbacks;
pub mod capture;
pub mod checker;
pub mod emit;
pub mod env;
pub mod problem;
pub mod python;
pub mod retry;
pub mod spec;
pub mod yaml;

use std::path::{Path, PathBuf};

use serde_json::Value;

pub use problem::{Problem, Problems};
pub use spec::AppSpec;
use yaml::Positions;

/// How to load a configuration file.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// A `.env` file that wins over `app.env_file` and the `.env` next to the YAML.
    pub env_file: Option<PathBuf>,
    /// Fail when a `${VAR}` without default is not set (also `app.strict_env`).
    pub strict_env: bool,
}

/// A parsed, interpolated configuration document with node positions.
#[derive(Debug, Clone)]
pub struct Document {
    /// The file it came from.
    pub path: PathBuf,
    /// The document, after environment interpolation.
    pub value: Value,
    /// Where each node was.
    pub positions: Positions,
}

/// Why a configuration could not be loaded at all (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The YAML is malformed.
    #[error("{path}:{line}:{column}: {message}")]
    Yaml {
        /// The file.
        path: String,
        /// Line.
        line: usize,
        /// Column.
        column: usize,
        /// What the parser said.
        message: String,
    },
    /// The environment is incomplete or a `.env` file is broken.
    #[error("{0}")]
    Env(String),
    /// The target is a Python app (`package.module:attr`), not a file.
    #[error(
        "{0}: a Python app target (package.module:attr) cannot run on this runtime, which runs \
         YAML files; describe the app in a worker.yaml (its handler, hook and transform refs \
         may be Python functions)"
    )]
    PythonTarget(String),
}

/// Reads `path`, loads `.env` files and interpolates `${VAR}` references.
///
/// `.env` precedence: `options.env_file`, else `app.env_file` (relative to the YAML, must exist),
/// else a `.env` next to the YAML when present. Variables already set in the process win.
pub fn load(path: &Path, options: &LoadOptions) -> Result<Document, LoadError> {
    let display = path.display().to_string();
    if !path.exists() && spec::is_python_ref(&display) {
        return Err(LoadError::PythonTarget(display));
    }
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: display.clone(),
        source,
    })?;
    let (mut value, positions) = yaml::parse(&text).map_err(|e| LoadError::Yaml {
        path: display.clone(),
        line: e.line,
        column: e.column,
        message: e.message,
    })?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut environment = env::Environment::from_process();
    let app_env_file = value
        .pointer("/app/env_file")
        .and_then(Value::as_str)
        .map(|f| dir.join(f));
    if let Some(file) = options.env_file.clone().or(app_env_file) {
        environment.load_dotenv(&file).map_err(LoadError::Env)?;
    } else if dir.join(".env").is_file() {
        environment
            .load_dotenv(&dir.join(".env"))
            .map_err(LoadError::Env)?;
    }
    let strict_env = options.strict_env
        || value
            .pointer("/app/strict_env")
            .and_then(Value::as_bool)
            .unwrap_or(false);
    let missing = env::interpolate(&mut value, &environment);
    if strict_env && !missing.is_empty() {
        let list: Vec<String> = missing
            .iter()
            .map(|m| format!("{} (at {})", m.name, m.path))
            .collect();
        return Err(LoadError::Env(format!(
            "{display}: missing environment variables: {}",
            list.join(", ")
        )));
    }
    Ok(Document {
        path: path.to_path_buf(),
        value,
        positions,
    })
}
