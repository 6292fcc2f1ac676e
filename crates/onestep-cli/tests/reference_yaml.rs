//! YAML files of the reference's SQL and broker resource types pass both `check --strict`s and
//! render to the same Mermaid chart on both sides: this port's
//! (`examples/sqlite-sources.yaml`, `examples/mysql-binlog.yaml`, `examples/rabbitmq-worker.yaml` and `examples/sqs-worker.yaml`
//! as shipped) and the Python
//! reference's (the same file with its `onestep:echo` handlers swapped for Python refs), so a
//! file moves between them unchanged apart from handler refs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn workspace() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn the_sql_sources_example_passes_both_strict_checks() {
    both_accept("examples/sqlite-sources.yaml", 2);
}

#[test]
fn the_binlog_example_passes_both_strict_checks() {
    both_accept("examples/mysql-binlog.yaml", 1);
}

#[test]
fn the_rabbitmq_example_passes_both_strict_checks() {
    both_accept("examples/rabbitmq-worker.yaml", 1);
}

#[test]
fn the_sqs_example_passes_both_strict_checks() {
    both_accept("examples/sqs-worker.yaml", 1);
}

/// Both checks accept `file`, whose `min_handlers` or more handlers are `onestep:echo` lines.
fn both_accept(file: &str, min_handlers: usize) {
    let example = workspace().join(file);
    let ours = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .args(["check", "--strict", example.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        ours.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&ours.stderr)
    );

    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(&example).unwrap();
    let mut handlers = 0;
    let python_yaml = text
        .lines()
        .map(|line| {
            if line.trim() == "handler: onestep:echo" {
                handlers += 1;
                line.replace(
                    "onestep:echo",
                    &format!("{{ref: \"shop_handlers:h{handlers}\"}}"),
                )
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        handlers >= min_handlers,
        "the example's handlers are onestep:echo lines"
    );
    let file = dir.path().join("sources.yaml");
    std::fs::write(&file, python_yaml).unwrap();
    let module: String = (1..=handlers)
        .map(|i| format!("async def h{i}(ctx, payload):\n    return payload\n"))
        .collect();
    std::fs::write(dir.path().join("shop_handlers.py"), module).unwrap();
    let reference = onestep_testkit::reference::cli()
        .args(["check", "--strict", file.to_str().unwrap()])
        .current_dir(dir.path())
        .env("PYTHONPATH", dir.path())
        .env(
            "ONESTEP_SQLITE_DSN",
            format!("sqlite:///{}", dir.path().join("shop.db").display()),
        )
        .output()
        .unwrap();
    assert_eq!(
        reference.status.code(),
        Some(0),
        "the reference refused the file: {}{}",
        String::from_utf8_lossy(&reference.stdout),
        String::from_utf8_lossy(&reference.stderr)
    );
    assert_same_render(&file, dir.path());
}

/// `onestep render` prints what the reference's `onestep render` prints for `file`, byte for
/// byte: node names as each runtime names its sources and sinks, the reference's class names.
fn assert_same_render(file: &std::path::Path, dir: &std::path::Path) {
    let sqlite = format!("sqlite:///{}", dir.join("shop.db").display());
    let ours = Command::new(env!("CARGO_BIN_EXE_onestep"))
        .arg("render")
        .arg(file)
        .current_dir(dir)
        .env("ONESTEP_SQLITE_DSN", &sqlite)
        .output()
        .unwrap();
    let reference = onestep_testkit::reference::cli()
        .arg("render")
        .arg(file)
        .current_dir(dir)
        .env("PYTHONPATH", dir)
        .env("ONESTEP_SQLITE_DSN", &sqlite)
        .output()
        .unwrap();
    assert!(
        ours.status.success() && reference.status.success(),
        "{ours:?}\n{reference:?}"
    );
    assert_eq!(
        String::from_utf8_lossy(&ours.stdout),
        String::from_utf8_lossy(&reference.stdout)
    );
}
