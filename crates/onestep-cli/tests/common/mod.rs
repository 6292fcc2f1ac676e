//! What the `check` rule tests share: a valid file and the problems `check --strict` finds.
#![allow(dead_code, clippy::unwrap_used)]

use onestep_cli::Registry;
use onestep_cli::config::{self, LoadOptions};

pub const VALID: &str = "apiVersion: onestep/v1alpha1
kind: App
app:
  name: demo
resources:
  db:
    type: sqlite
    dsn: sqlite://demo.db
  jobs:
    type: sqlite_execution_source
    connector: db
    namespace: demo
    task_names: [work]
  queue:
    type: memory
    maxsize: 10
tasks:
  - name: work
    source: jobs
    handler: onestep:echo
";

pub fn problems(yaml: &str) -> Vec<(String, String, Option<usize>)> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("worker.yaml");
    std::fs::write(&path, yaml).unwrap();
    let doc = config::load(&path, &LoadOptions::default()).unwrap();
    match config::spec::validate(&doc, &Registry::with_builtins(), true) {
        Ok(_) => Vec::new(),
        Err(p) => p
            .items
            .into_iter()
            .map(|i| (i.path, i.message, i.line))
            .collect(),
    }
}

pub fn expect(yaml: &str, path: &str, message: &str) {
    let found = problems(yaml);
    assert!(
        found
            .iter()
            .any(|(p, m, _)| p == path && m.contains(message)),
        "expected a problem at {path} containing {message:?}; got {found:#?}"
    );
}
