//! Collects every ```rust block of README.md and docs/*.md into one module per block.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    docs.retain(|p| p.extension().is_some_and(|e| e == "md"));
    docs.sort();
    files.extend(docs);
    println!("cargo:rerun-if-changed={}", root.join("docs").display());
    let mut out = String::new();
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        let stem = file
            .file_stem()
            .map(|s| s.to_string_lossy().replace(['-', '.'], "_").to_lowercase())
            .unwrap_or_default();
        let mut block: Option<(usize, String)> = None;
        for (index, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            match &mut block {
                None if trimmed == "```rust" => block = Some((index + 1, String::new())),
                Some((start, body)) if trimmed.starts_with("```") => {
                    let _ = writeln!(
                        out,
                        "/// `{}` line {start}.\n#[allow(warnings, clippy::all, clippy::pedantic, clippy::restriction)]\nmod {stem}_line_{start} {{\n{body}}}\n",
                        file.strip_prefix(&root).unwrap_or(file).display()
                    );
                    block = None;
                }
                Some((_, body)) => {
                    body.push_str(line);
                    body.push('\n');
                }
                None => {}
            }
        }
    }
    let path = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default()).join("snippets.rs");
    if let Err(err) = std::fs::write(&path, out) {
        panic!("cannot write {}: {err}", path.display());
    }
}
