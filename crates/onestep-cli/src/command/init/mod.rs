//! `onestep init [PATH] [--template T] [--force]`: a working project skeleton, the same files the
//! reference's `onestep init` writes (a `worker.yaml` whose handler is a Python ref, the Python
//! package under `src/`, `pyproject.toml`, `README.md`), so the project runs on either runtime.

use std::path::{Path, PathBuf};

/// Arguments of `init`.
#[derive(Debug, clap::Args)]
pub struct InitArgs {
    /// The directory to initialize (created when missing).
    #[arg(default_value = ".")]
    path: PathBuf,
    /// The scenario: interval (a periodic task), webhook (HTTP intake), redis (a stream
    /// consumer group), sql-cdc (MySQL binlog into a table sink).
    #[arg(long, default_value = "interval", value_parser = TEMPLATES.map(|t| t.name))]
    template: String,
    /// Overwrite scaffold files that already exist.
    #[arg(long)]
    force: bool,
}

/// A scenario: its `worker.yaml` and the dependency the reference's hint installs.
struct Template {
    name: &'static str,
    worker: &'static str,
    pip_hint: &'static str,
}

const TEMPLATES: [Template; 4] = [
    Template {
        name: "interval",
        worker: include_str!("templates/interval.yaml"),
        pip_hint: "pip install 'onestep[yaml]'",
    },
    Template {
        name: "webhook",
        worker: include_str!("templates/webhook.yaml"),
        pip_hint: "pip install 'onestep[yaml]'",
    },
    Template {
        name: "redis",
        worker: include_str!("templates/redis.yaml"),
        pip_hint: "pip install 'onestep[redis,yaml]'",
    },
    Template {
        name: "sql-cdc",
        worker: include_str!("templates/sql-cdc.yaml"),
        pip_hint: "pip install 'onestep[mysql,yaml]'",
    },
];

/// Writes the skeleton and prints what it wrote: 0, or 2 when it cannot (files that exist
/// without `--force`, an unwritable directory); nothing is written then.
pub fn init(args: &InitArgs) -> u8 {
    match scaffold(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("onestep: failed to initialize {}: {e}", args.path.display());
            2
        }
    }
}

fn scaffold(args: &InitArgs) -> Result<(), String> {
    let template = TEMPLATES
        .iter()
        .find(|t| t.name == args.template)
        .ok_or_else(|| format!("unknown template {:?}", args.template))?;
    let root = absolute(&args.path).map_err(|e| e.to_string())?;
    let base = root
        .file_name()
        .map(|n| n.to_string_lossy().trim().to_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "onestep-worker".to_owned());
    let project = normalized(&base, '-', "onestep-worker", "worker");
    let package = normalized(&base, '_', "onestep_worker", "worker");
    let deps = template
        .pip_hint
        .trim_start_matches("pip install ")
        .trim()
        .trim_matches(|c| c == '\'' || c == '"');
    let fill = |text: &str| {
        text.replace("@@PROJECT@@", &project)
            .replace("@@PACKAGE@@", &package)
            .replace("@@DEPS@@", deps)
    };
    let src = PathBuf::from("src").join(&package);
    let files: Vec<(PathBuf, String)> = vec![
        (
            "pyproject.toml".into(),
            fill(include_str!("templates/pyproject.toml")),
        ),
        (
            "README.md".into(),
            fill(include_str!("templates/README.md")),
        ),
        ("worker.yaml".into(), fill(template.worker)),
        (
            src.join("__init__.py"),
            fill(include_str!("templates/package_init.py")),
        ),
        (
            src.join("tasks/__init__.py"),
            include_str!("templates/tasks_init.py").into(),
        ),
        (
            src.join("tasks/demo.py"),
            include_str!("templates/tasks_demo.py").into(),
        ),
        (
            src.join("transforms/__init__.py"),
            include_str!("templates/transforms_init.py").into(),
        ),
        (
            src.join("transforms/demo.py"),
            include_str!("templates/transforms_demo.py").into(),
        ),
    ];
    let conflicts: Vec<String> = files
        .iter()
        .filter(|(path, _)| root.join(path).exists())
        .map(|(path, _)| path.display().to_string())
        .collect();
    if !conflicts.is_empty() && !args.force {
        return Err(format!(
            "refusing to overwrite existing files: {} (--force overwrites them)",
            conflicts.join(", ")
        ));
    }
    for (path, text) in &files {
        let destination = root.join(path);
        if let Some(parent) = destination.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(&destination, text)
            .map_err(|e| format!("cannot write {}: {e}", destination.display()))?;
    }
    println!("Initialized OneStep project at {}", root.display());
    println!("Project: {project}");
    println!("Package: {package}");
    println!("Template: {}", template.name);
    println!("Files:");
    for (path, _) in &files {
        println!("- {}", root.join(path).display());
    }
    println!("Install dependencies: {}", template.pip_hint);
    println!(
        "Run it: cd {} && onestep check --strict worker.yaml && onestep run worker.yaml \
         (the Rust runtime needs only your package's own dependencies)",
        root.display()
    );
    Ok(())
}

/// `path` made absolute as Python's `Path(path).expanduser().resolve()` makes it.
fn absolute(path: &Path) -> std::io::Result<PathBuf> {
    let expanded = match path.strip_prefix("~") {
        Ok(rest) => std::env::var_os("HOME")
            .map_or_else(|| path.to_owned(), |h| PathBuf::from(h).join(rest)),
        Err(_) => path.to_owned(),
    };
    match expanded.canonicalize() {
        Ok(resolved) => Ok(resolved),
        Err(_) => std::path::absolute(&expanded),
    }
}

/// Runs of characters other than ASCII letters and digits become `separator`, trimmed and
/// lowercased; empty becomes `fallback`, a leading digit gets `prefix` and the separator.
fn normalized(value: &str, separator: char, fallback: &str, prefix: &str) -> String {
    let mut out = String::new();
    for c in value.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with(separator) {
            out.push(separator);
        }
    }
    let out = out.trim_matches(separator);
    match out.chars().next() {
        None => fallback.to_owned(),
        Some(c) if c.is_ascii_digit() => format!("{prefix}{separator}{out}"),
        Some(_) => out.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::normalized;

    #[test]
    fn names_follow_the_reference() {
        assert_eq!(normalized("My Worker!", '-', "x", "worker"), "my-worker");
        assert_eq!(normalized("My Worker!", '_', "x", "worker"), "my_worker");
        assert_eq!(normalized("2fast", '_', "x", "worker"), "worker_2fast");
        assert_eq!(
            normalized("___", '-', "onestep-worker", "worker"),
            "onestep-worker"
        );
        assert_eq!(normalized("façade", '-', "x", "worker"), "fa-ade");
    }
}
