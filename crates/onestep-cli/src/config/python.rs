//! Python handlers: the refs of a config that name no Rust handler run in a
//! [`PythonPool`]; `check` imports them first.

use std::path::{Path, PathBuf};

use onestep_python::{PythonConfig, PythonPool, RefCheck};

use super::emit::EmitSpec;
use super::problem::Problems;
use super::spec::AppSpec;
use super::yaml::Positions;
use crate::registry::Registry;

/// The refs of `spec` that run in Python (handlers that name no Rust handler; hooks,
/// transforms and predicates that name no Rust callback), each with the YAML path of its first
/// use.
pub fn python_refs(spec: &AppSpec, registry: &Registry) -> Vec<(String, String)> {
    let mut refs: Vec<(String, String)> = Vec::new();
    let mut add = |r: &str, path: &str| {
        if !refs.iter().any(|(seen, _)| seen == r) {
            refs.push((r.to_owned(), path.to_owned()));
        }
    };
    for t in &spec.tasks {
        if let Some((r, _)) = &t.handler
            && !registry.has_handler(r)
        {
            add(r, &t.handler_path);
        }
        let transforms = t.targets.iter().flat_map(|e| {
            let when = match e {
                EmitSpec::Route { when, .. } => Some(when),
                EmitSpec::Binding(_) => None,
            };
            when.into_iter().chain(
                e.bindings()
                    .into_iter()
                    .filter_map(|b| b.transform.as_ref()),
            )
        });
        for c in transforms.chain(t.hooks.all()) {
            if !registry.has_callback(&c.reference) {
                add(&c.reference, &c.path);
            }
        }
    }
    for c in spec.hooks.all() {
        if !registry.has_callback(&c.reference) {
            add(&c.reference, &c.path);
        }
    }
    refs
}

/// The pool settings for a config file: `interpreter` (else `$ONESTEP_PYTHON`, `python`,
/// `python3`), `processes`, and the reference's import paths for `yaml` from the working
/// directory.
pub fn python_config(yaml: &Path, interpreter: Option<PathBuf>, processes: usize) -> PythonConfig {
    let cwd = std::env::current_dir().unwrap_or_default();
    PythonConfig {
        interpreter,
        processes: processes.max(1),
        import_paths: PythonConfig::import_paths_for(yaml, &cwd),
        ..PythonConfig::default()
    }
}

/// Imports every Python ref of `spec` with the configured interpreter, as the reference's
/// `check` imports its refs; a ref that fails is a problem at its handler's position.
pub async fn check_imports(
    spec: &AppSpec,
    registry: &Registry,
    python: &PythonConfig,
    positions: &Positions,
    problems: &mut Problems,
) {
    let refs = python_refs(spec, registry);
    if refs.is_empty() {
        return;
    }
    let names: Vec<String> = refs.iter().map(|(r, _)| r.clone()).collect();
    match PythonPool::check(python, &names).await {
        Ok(report) => {
            for (r, path) in &refs {
                if let Some(RefCheck::Failed(error)) = report.get(r) {
                    problems.add(
                        positions,
                        path.clone(),
                        format!("Python ref {r:?} cannot be imported: {error}"),
                    );
                }
            }
        }
        Err(e) => {
            let (r, path) = &refs[0];
            problems.add(
                positions,
                path.clone(),
                format!(
                    "handler {r:?} is not a registered Rust handler, so it runs in Python: {e}"
                ),
            );
        }
    }
}
