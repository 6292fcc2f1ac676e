//! [`PythonConfig`]: which interpreter, how many processes, where user modules are imported from.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How the Python worker processes are started.
#[derive(Debug, Clone)]
pub struct PythonConfig {
    /// The interpreter; `None` picks `$ONESTEP_PYTHON`, else `python`, else `python3` on `PATH`.
    pub interpreter: Option<PathBuf>,
    /// How many long-lived processes serve calls (each runs many async calls at once, and sync
    /// functions in its thread pool). At least 1.
    pub processes: usize,
    /// Directories put first on `sys.path`, in order.
    pub import_paths: Vec<PathBuf>,
    /// How long a process may take to start and import the handler modules.
    pub startup_timeout: Duration,
    /// How long a process may take to exit after its pipe closes before it is killed.
    pub shutdown_timeout: Duration,
}

impl Default for PythonConfig {
    fn default() -> Self {
        Self {
            interpreter: None,
            processes: 1,
            import_paths: Vec::new(),
            startup_timeout: Duration::from_secs(60),
            shutdown_timeout: Duration::from_secs(5),
        }
    }
}

impl PythonConfig {
    /// The interpreter to start: the configured one, `$ONESTEP_PYTHON`, or `python` / `python3`
    /// found on `PATH` (a virtualenv's `python` when one is active).
    pub fn resolve_interpreter(&self) -> Option<PathBuf> {
        if let Some(explicit) = &self.interpreter {
            return Some(explicit.clone());
        }
        if let Some(env) = std::env::var_os("ONESTEP_PYTHON").filter(|v| !v.is_empty()) {
            return Some(PathBuf::from(env));
        }
        let path = std::env::var_os("PATH")?;
        ["python", "python3"].iter().find_map(|name| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(name))
                .find(|candidate| is_executable(candidate))
        })
    }

    /// The import paths the reference's `onestep run worker.yaml` uses: the YAML's directory,
    /// the working directory and its `src/`, and the nearest project root (a directory with
    /// `pyproject.toml`, `setup.py` or `setup.cfg`) and its `src/`; only those that exist, once.
    pub fn import_paths_for(yaml: &Path, cwd: &Path) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = Vec::new();
        let mut add = |p: PathBuf| {
            if p.is_dir() && !paths.contains(&p) {
                paths.push(p);
            }
        };
        let yaml = if yaml.is_absolute() {
            yaml.to_path_buf()
        } else {
            cwd.join(yaml)
        };
        for base in [
            yaml.parent().map(Path::to_path_buf),
            Some(cwd.to_path_buf()),
        ]
        .into_iter()
        .flatten()
        {
            add(base.clone());
            add(base.join("src"));
            if let Some(root) = project_root(&base) {
                add(root.join("src"));
                add(root);
            }
        }
        paths
    }
}

fn project_root(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|dir| {
            ["pyproject.toml", "setup.py", "setup.cfg"]
                .iter()
                .any(|marker| dir.join(marker).exists())
        })
        .map(Path::to_path_buf)
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn import_paths_follow_the_reference_order_and_skip_missing_directories() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("proj");
        std::fs::create_dir_all(project.join("src")).unwrap();
        std::fs::create_dir_all(project.join("deploy")).unwrap();
        std::fs::write(project.join("pyproject.toml"), "").unwrap();
        let paths = PythonConfig::import_paths_for(Path::new("deploy/worker.yaml"), &project);
        assert_eq!(
            paths,
            vec![project.join("deploy"), project.join("src"), project.clone()]
        );
    }

    #[test]
    fn an_explicit_interpreter_wins() {
        let config = PythonConfig {
            interpreter: Some(PathBuf::from("/opt/py/bin/python")),
            ..PythonConfig::default()
        };
        assert_eq!(
            config.resolve_interpreter(),
            Some(PathBuf::from("/opt/py/bin/python"))
        );
    }
}
