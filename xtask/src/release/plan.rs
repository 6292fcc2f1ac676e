//! `cargo xtask release-plan`: the ordered plan for a human.

use std::fmt::Write as _;
use std::fs;

use anyhow::Result;

use super::checks::{CHANGELOG_FILE, parse_changelog, summarize};
use super::git::{self, ReleaseState, tag_name};
use super::workspace::Workspace;
use super::{Env, Report};

/// One row of the plan.
struct Row {
    name: String,
    old: String,
    new: String,
    publish: bool,
    why: String,
    changes: Option<String>,
}

/// The plan as text: crates in publish order with old → new version and why, the crates that are
/// not published, what blocks the release, and the commands to run.
pub fn render(env: &Env, ws: &Workspace, report: &Report) -> Result<String> {
    let order = ws.publish_order()?;
    let repo = git::is_repository(env);
    let tags = if repo { git::tags(env)? } else { Vec::new() };
    let changelog = fs::read_to_string(ws.root.join(CHANGELOG_FILE))
        .map(|text| parse_changelog(&text))
        .unwrap_or_default();
    let mut rows = Vec::new();
    for krate in &order {
        let state = if repo {
            Some(git::release_state(env, ws, krate, &tags)?)
        } else {
            None
        };
        let new = krate.version.to_string();
        let (old, publish, mut why) = match state {
            None => (
                "?".to_string(),
                true,
                "not a git repository: release state unknown".to_string(),
            ),
            Some(ReleaseState::Unreleased) => (
                "unreleased".to_string(),
                true,
                format!("first release (no {}-v* tag)", krate.name),
            ),
            Some(ReleaseState::Unchanged { tag }) => (
                new.clone(),
                false,
                format!("unchanged since {tag}: nothing to publish"),
            ),
            Some(ReleaseState::Bumped { tag, from, changed }) => (
                from.to_string(),
                true,
                if changed.is_empty() {
                    format!("version bumped; no file changed since {tag}")
                } else {
                    format!(
                        "{} file(s) changed since {tag}: {}",
                        changed.len(),
                        summarize(&changed)
                    )
                },
            ),
            Some(ReleaseState::ChangedWithoutBump { tag, changed }) => (
                new.clone(),
                false,
                format!(
                    "BLOCKED: {} file(s) changed since {tag} without a version bump",
                    changed.len()
                ),
            ),
            Some(ReleaseState::Backwards { tag, from }) => (
                from.to_string(),
                false,
                format!("BLOCKED: version is lower than {tag}"),
            ),
        };
        let after: Vec<&str> = ws.publish_prerequisites(krate).into_iter().collect();
        if !after.is_empty() {
            let _ = write!(why, "; after {}", after.join(", "));
        }
        let mut changes = None;
        if publish {
            let entry = changelog
                .iter()
                .find(|e| e.krate == krate.name && e.version == krate.version);
            match entry.and_then(|e| e.items.first()) {
                Some(item) => {
                    let more = entry.map_or(0, |e| e.items.len() - 1);
                    let mut line = shorten(item, 90);
                    if more > 0 {
                        let _ = write!(line, " (+{more} more)");
                    }
                    changes = Some(line);
                }
                None => why.push_str("; no CHANGELOG entry"),
            }
        }
        rows.push(Row {
            name: krate.name.clone(),
            old,
            new,
            publish,
            why,
            changes,
        });
    }

    let mut out = String::new();
    let _ = writeln!(
        out,
        "Release plan: publish in this order, tagging each crate `<crate>-v<version>` once it is \
         on crates.io.\n"
    );
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(5).max(5);
    let versions: Vec<String> = rows
        .iter()
        .map(|r| format!("{} → {}", r.old, r.new))
        .collect();
    let vwidth = versions
        .iter()
        .map(|v| v.chars().count())
        .max()
        .unwrap_or(0);
    for (i, (row, versions)) in rows.iter().zip(&versions).enumerate() {
        let pad = vwidth - versions.chars().count();
        let _ = writeln!(
            out,
            "  {}. {:width$}  {versions}{:pad$}  {}",
            i + 1,
            row.name,
            "",
            row.why
        );
        if let Some(changes) = &row.changes {
            let _ = writeln!(out, "     {:width$}  changelog: {changes}", "");
        }
    }
    let unpublished: Vec<&str> = ws
        .crates
        .iter()
        .filter(|c| !c.publish)
        .map(|c| c.name.as_str())
        .collect();
    if !unpublished.is_empty() {
        let _ = writeln!(
            out,
            "\nNot published (publish = false): {}",
            unpublished.join(", ")
        );
    }
    if report.problems.is_empty() {
        let _ = writeln!(
            out,
            "\nChecks without packaging pass; run `cargo xtask release-check` for packaging too."
        );
    } else {
        let _ = writeln!(
            out,
            "\nBlocked by {} problem(s) (from `cargo xtask release-check`):",
            report.problems.len()
        );
        for p in &report.problems {
            let _ = writeln!(out, "  - {}: {}", p.check, p.message);
        }
    }
    let publishing: Vec<&Row> = rows.iter().filter(|r| r.publish).collect();
    if !publishing.is_empty() {
        let _ = writeln!(
            out,
            "\nThen, in this order (each after the previous succeeded):"
        );
        for row in publishing {
            let version = semver::Version::parse(&row.new)?;
            let _ = writeln!(
                out,
                "  cargo publish -p {} && git tag {}",
                row.name,
                tag_name(&row.name, &version)
            );
        }
        let _ = writeln!(out, "  git push --tags");
    }
    Ok(out)
}

/// `text` cut to `max` characters with an ellipsis.
fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max - 1).collect();
    format!("{}…", cut.trim_end())
}
