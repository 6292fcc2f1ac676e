//! The release checks that need no build. Each adds problems (and a note saying what it verified)
//! to a [`Report`].

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use semver::{Comparator, Op, Version, VersionReq};

use super::git::{self, ReleaseState};
use super::workspace::{Crate, DepKind, PathDep, Workspace, normalize};
use super::{Env, FLOORS, Report};

/// Check names, as they appear in messages.
pub const REQUIREMENTS: &str = "requirements";
/// See [`REQUIREMENTS`].
pub const METADATA: &str = "metadata";
/// See [`REQUIREMENTS`].
pub const CHANGELOG: &str = "changelog";
/// See [`REQUIREMENTS`].
pub const TAGS: &str = "tags";
/// See [`REQUIREMENTS`].
pub const INCLUDE_PATHS: &str = "include-paths";
/// See [`REQUIREMENTS`].
pub const LOCKFILE: &str = "lockfile";

/// The changelog file, relative to the workspace root.
pub const CHANGELOG_FILE: &str = "CHANGELOG.md";

/// Requirements between members: present, admitting the current version, respecting [`FLOORS`],
/// and never pointing a published crate at an unpublished one.
pub fn requirements(ws: &Workspace, report: &mut Report) {
    let before = report.problems.len();
    let mut checked = 0;
    for krate in ws.published() {
        for dep in &krate.deps {
            let Some(target) = ws.get(&dep.name) else {
                continue;
            };
            let what = format!(
                "{} [{}] {} = \"{}\"",
                krate.name,
                dep.kind.table(),
                dep.name,
                dep.req_text
            );
            if !target.publish {
                if dep.is_published() {
                    let fix = if dep.kind == DepKind::Dev {
                        "drop its `version` (in [workspace.dependencies] too) so that cargo \
                         strips the path-only dev-dependency when packaging"
                    } else {
                        "a published crate cannot depend on it"
                    };
                    report.problem(
                        REQUIREMENTS,
                        format!("{what}: {} is `publish = false`; {fix}", dep.name),
                    );
                }
                continue;
            }
            if !dep.has_version {
                if dep.kind != DepKind::Dev {
                    report.problem(
                        REQUIREMENTS,
                        format!(
                            "{} [{}] {}: no `version` requirement; cargo publish refuses path \
                             dependencies without one (add `version = \"{}\"`)",
                            krate.name,
                            dep.kind.table(),
                            dep.name,
                            target.version
                        ),
                    );
                }
                continue;
            }
            checked += 1;
            if !dep.req.matches(&target.version) {
                report.problem(
                    REQUIREMENTS,
                    format!(
                        "{what} does not admit {}'s current version {}, so {} cannot be \
                         built or published with it; make the requirement (in {} or \
                         [workspace.dependencies]) admit {}",
                        dep.name,
                        target.version,
                        krate.name,
                        ws.relative(&krate.dir.join("Cargo.toml")).display(),
                        target.version
                    ),
                );
            }
            check_floor(krate, dep, &what, report);
        }
    }
    if report.problems.len() == before {
        let floors: Vec<String> = FLOORS
            .iter()
            .map(|f| format!("{} >= {}", f.krate, f.version))
            .collect();
        report.note(
            REQUIREMENTS,
            format!(
                "ok: {checked} published requirements between members admit the current \
                 versions and respect the floors ({})",
                floors.join(", ")
            ),
        );
    }
}

/// Fails `dep` when it admits a version older than the dependency's floor.
fn check_floor(krate: &Crate, dep: &PathDep, what: &str, report: &mut Report) {
    let Some(floor) = FLOORS.iter().find(|f| f.krate == dep.name) else {
        return;
    };
    let Ok(min) = Version::parse(floor.version) else {
        report.problem(
            REQUIREMENTS,
            format!(
                "the floor of {} ({:?}) is not semver",
                floor.krate, floor.version
            ),
        );
        return;
    };
    if lowest_admitted(&dep.req) < min {
        report.problem(
            REQUIREMENTS,
            format!(
                "{what} admits versions older than {v}, the first {} with {}, which {} uses; \
                 require at least {v} (e.g. version = \"{v}\")",
                floor.krate,
                floor.feature,
                krate.name,
                v = floor.version
            ),
        );
    }
}

/// A lower bound of the versions `req` admits: every admitted version is at least this (the
/// bound itself need not be admitted). `*` and requirements with only `<`/`<=` give `0.0.0`.
pub fn lowest_admitted(req: &VersionReq) -> Version {
    req.comparators
        .iter()
        .map(comparator_floor)
        .max()
        .unwrap_or(Version::new(0, 0, 0))
}

/// The lowest version one comparator admits (see [`lowest_admitted`]).
fn comparator_floor(c: &Comparator) -> Version {
    let filled = Version {
        major: c.major,
        minor: c.minor.unwrap_or(0),
        patch: c.patch.unwrap_or(0),
        pre: c.pre.clone(),
        build: Default::default(),
    };
    match c.op {
        Op::Less | Op::LessEq => Version::new(0, 0, 0),
        Op::Greater => match (c.minor, c.patch) {
            // `>1` is `>=2.0.0`, `>1.2` is `>=1.3.0`.
            (None, _) => Version::new(c.major + 1, 0, 0),
            (Some(minor), None) => Version::new(c.major, minor + 1, 0),
            // `>1.2.3` admits 1.2.4 and up, and pre-releases of 1.2.3 after `pre` when it has one.
            (Some(_), Some(patch)) if c.pre.is_empty() => {
                Version::new(c.major, filled.minor, patch + 1)
            }
            _ => filled,
        },
        // `=`, `>=`, `~`, `^` and wildcards admit nothing below the version they name.
        _ => filled,
    }
}

/// `description` and `license` of every published crate.
pub fn metadata(ws: &Workspace, report: &mut Report) {
    let before = report.problems.len();
    for krate in ws.published() {
        if krate.description.is_none() {
            report.problem(
                METADATA,
                format!(
                    "{} has no `description`; crates.io requires one",
                    krate.name
                ),
            );
        }
        if krate.license.is_none() {
            report.problem(
                METADATA,
                format!(
                    "{} has neither `license` nor `license-file`; crates.io requires one",
                    krate.name
                ),
            );
        }
    }
    if report.problems.len() == before {
        report.note(
            METADATA,
            "ok: every published crate has a description and a license",
        );
    }
}

/// A `## <crate> <version>` section of the changelog: its items.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangelogEntry {
    /// The crate.
    pub krate: String,
    /// The version.
    pub version: Version,
    /// The list items (`- …` lines), without the marker.
    pub items: Vec<String>,
}

/// The entries of a changelog: every `## <crate> <version>` heading (anything after the version,
/// such as a date, is ignored) with the list items below it up to the next `#` or `##` heading
/// (`### Added` and the like stay inside the section).
pub fn parse_changelog(text: &str) -> Vec<ChangelogEntry> {
    let mut entries: Vec<ChangelogEntry> = Vec::new();
    let mut current: Option<ChangelogEntry> = None;
    for line in text.lines() {
        let level = line.len() - line.trim_start_matches('#').len();
        if level >= 3 && line[level..].starts_with(' ') {
            // `### Added` and deeper headings are part of the section.
            continue;
        }
        if level > 0 {
            entries.extend(current.take());
            if let Some(heading) = line.strip_prefix("## ") {
                let mut words = heading.split_whitespace();
                if let (Some(krate), Some(version)) = (words.next(), words.next())
                    && let Ok(version) = Version::parse(version.trim_start_matches('v'))
                {
                    current = Some(ChangelogEntry {
                        krate: krate.to_string(),
                        version,
                        items: Vec::new(),
                    });
                }
            }
        } else if let Some(entry) = current.as_mut() {
            let trimmed = line.trim_start();
            let item = trimmed
                .strip_prefix("- ")
                .or_else(|| trimmed.strip_prefix("* "));
            match item {
                Some(item) if line.len() == trimmed.len() => {
                    entry.items.push(item.trim().to_string());
                }
                // A continuation line or a nested item belongs to the item above.
                _ if !trimmed.is_empty() => {
                    if let Some(last) = entry.items.last_mut() {
                        last.push(' ');
                        last.push_str(trimmed.trim());
                    }
                }
                _ => {}
            }
        }
    }
    entries.extend(current);
    entries
}

/// A non-empty `CHANGELOG.md` entry for every published crate's current version.
pub fn changelog(ws: &Workspace, report: &mut Report) {
    let path = ws.root.join(CHANGELOG_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) => {
            report.problem(
                CHANGELOG,
                format!(
                    "cannot read {CHANGELOG_FILE}: {err}; it needs a `## <crate> <version>` \
                     section per published crate"
                ),
            );
            return;
        }
    };
    let entries = parse_changelog(&text);
    let before = report.problems.len();
    for krate in ws.published() {
        let entry = entries
            .iter()
            .find(|e| e.krate == krate.name && e.version == krate.version);
        match entry {
            None => report.problem(
                CHANGELOG,
                format!(
                    "{CHANGELOG_FILE} has no entry for {} {}: add a `## {} {}` section listing \
                     what changed",
                    krate.name, krate.version, krate.name, krate.version
                ),
            ),
            Some(e) if e.items.is_empty() => report.problem(
                CHANGELOG,
                format!(
                    "{CHANGELOG_FILE}: the `## {} {}` section lists nothing; add `- …` items",
                    krate.name, krate.version
                ),
            ),
            Some(_) => {}
        }
    }
    if report.problems.len() == before {
        report.note(
            CHANGELOG,
            "ok: CHANGELOG.md has an entry for every published crate's current version",
        );
    }
}

/// No crate changed since its last release tag without a version bump.
pub fn tags(env: &Env, ws: &Workspace, report: &mut Report) {
    if !git::is_repository(env) {
        report.note(TAGS, "skipped: not a git repository");
        return;
    }
    let tags = match git::tags(env) {
        Ok(tags) => tags,
        Err(err) => {
            report.problem(TAGS, format!("cannot list git tags: {err:#}"));
            return;
        }
    };
    let before = report.problems.len();
    let mut unreleased = Vec::new();
    for krate in ws.published() {
        match git::release_state(env, ws, krate, &tags) {
            Ok(ReleaseState::Unreleased) => unreleased.push(krate.name.as_str()),
            Ok(ReleaseState::ChangedWithoutBump { tag, changed }) => report.problem(
                TAGS,
                format!(
                    "{} changed since {tag} ({}) but its version is still {}; bump it (and add a \
                     CHANGELOG entry)",
                    krate.name,
                    summarize(&changed),
                    krate.version
                ),
            ),
            Ok(ReleaseState::Backwards { tag, from }) => report.problem(
                TAGS,
                format!(
                    "{} is at {}, lower than its released {from} ({tag})",
                    krate.name, krate.version
                ),
            ),
            Ok(ReleaseState::Unchanged { .. } | ReleaseState::Bumped { .. }) => {}
            Err(err) => report.problem(TAGS, format!("{}: {err:#}", krate.name)),
        }
    }
    if report.problems.len() == before {
        let total = ws.published().count();
        let message = if unreleased.len() == total {
            "ok: no release tags (`<crate>-v<version>`) yet, so every crate is unreleased"
                .to_string()
        } else if unreleased.is_empty() {
            "ok: every crate changed since its last release tag has a higher version".to_string()
        } else {
            format!(
                "ok: every crate changed since its last release tag has a higher version; \
                 unreleased: {}",
                unreleased.join(", ")
            )
        };
        report.note(TAGS, message);
    }
}

/// `a, b, c and N more files`.
pub fn summarize(files: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut text = files
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if files.len() > SHOWN {
        text.push_str(&format!(" and {} more", files.len() - SHOWN));
    }
    text
}

/// No `include_str!`/`include_bytes!`/`include!` in a published crate's `src/` or `build.rs`
/// names a file outside the crate directory: `cargo package` only packs the crate directory
/// (following symlinks in it), so such a crate builds in the workspace and not from crates.io.
pub fn include_paths(ws: &Workspace, report: &mut Report) {
    let before = report.problems.len();
    let mut scanned = 0;
    for krate in ws.published() {
        let mut files = rust_files(&krate.dir.join("src"));
        let build = krate.dir.join("build.rs");
        if build.is_file() {
            files.push(build);
        }
        for file in files {
            let Ok(text) = fs::read_to_string(&file) else {
                continue;
            };
            scanned += 1;
            for include in find_includes(&text) {
                let base = if include.from_manifest_dir {
                    krate.dir.clone()
                } else {
                    file.parent().map(Path::to_path_buf).unwrap_or_default()
                };
                let prefix = include.literal.trim_start_matches('/');
                let target = normalize(&base.join(prefix));
                if !target.starts_with(&krate.dir) {
                    report.problem(
                        INCLUDE_PATHS,
                        format!(
                            "{}: {}:{} includes \"{}\", which is outside the crate directory \
                             ({}); cargo package leaves it out, so the published crate does not \
                             build. Put the file inside the crate (a symlink to its directory \
                             works: cargo packs what it points to) and include it from there",
                            krate.name,
                            ws.relative(&file).display(),
                            include.line,
                            include.literal,
                            ws.relative(&target).display()
                        ),
                    );
                }
            }
        }
    }
    if report.problems.len() == before {
        report.note(
            INCLUDE_PATHS,
            format!(
                "ok: no include_str!/include_bytes!/include! in {scanned} source files reaches \
                 outside its crate"
            ),
        );
    }
}

/// An `include_str!`/`include_bytes!`/`include!` in a source file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Include {
    /// 1-based line of the macro name.
    pub line: usize,
    /// The concatenated string literals up to the first non-literal argument (a macro
    /// parameter, say): the path or its known prefix.
    pub literal: String,
    /// Whether the path starts at `env!("CARGO_MANIFEST_DIR")` (else it is relative to the file).
    pub from_manifest_dir: bool,
}

/// The `include_str!(…)`/`include_bytes!(…)`/`include!(…)` calls in `text`, outside `//`
/// comments. Paths built from `OUT_DIR` are skipped (they are generated, not packaged).
pub fn find_includes(text: &str) -> Vec<Include> {
    let mut found = Vec::new();
    for name in ["include_str!(", "include_bytes!(", "include!("] {
        let mut from = 0;
        while let Some(at) = text[from..].find(name) {
            let start = from + at;
            from = start + name.len();
            let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
            if text[line_start..start].contains("//") {
                continue;
            }
            let args = balanced(&text[from..]);
            if args.contains("OUT_DIR") {
                continue;
            }
            let from_manifest_dir = args.contains("CARGO_MANIFEST_DIR");
            found.push(Include {
                line: text[..start].matches('\n').count() + 1,
                literal: literal_prefix(args),
                from_manifest_dir,
            });
        }
    }
    found.sort_by_key(|i| i.line);
    found
}

/// The text up to the parenthesis closing an already opened one.
fn balanced(text: &str) -> &str {
    let mut depth = 1;
    for (i, ch) in text.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &text[..i];
                }
            }
            _ => {}
        }
    }
    text
}

/// The string literals of a macro's arguments concatenated, stopping at the first argument that
/// is neither a literal nor `env!("CARGO_MANIFEST_DIR")` (`concat!(` is looked through).
fn literal_prefix(args: &str) -> String {
    let args = args.trim();
    let args = args.strip_prefix("concat!(").map(balanced).unwrap_or(args);
    let mut out = String::new();
    for part in split_top_level(args) {
        let part = part.trim();
        if part.is_empty() || part.starts_with("env!(") {
            continue;
        }
        match part.strip_prefix('"').and_then(|p| p.strip_suffix('"')) {
            Some(literal) => out.push_str(literal),
            None => break,
        }
    }
    out
}

/// `args` split at commas outside parentheses and string literals.
fn split_top_level(args: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut in_string, mut escaped, mut start) = (0, false, false, 0);
    for (i, ch) in args.char_indices() {
        if in_string {
            match ch {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match ch {
            '"' => in_string = true,
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&args[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&args[start..]);
    parts
}

/// The `.rs` files under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        let Ok(entries) = fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// `Cargo.lock` exists and `cargo metadata --locked` needs no change to it.
pub fn lockfile(env: &Env, report: &mut Report) {
    if !env.root.join("Cargo.lock").is_file() {
        report.problem(
            LOCKFILE,
            "Cargo.lock is missing; run `cargo generate-lockfile` and commit it",
        );
        return;
    }
    let mut cmd = env.cargo();
    cmd.args(["metadata", "--locked", "--format-version", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let out = match cmd.output() {
        Ok(out) => out,
        Err(err) => {
            report.problem(LOCKFILE, format!("could not run cargo metadata: {err}"));
            return;
        }
    };
    if out.status.success() {
        report.note(
            LOCKFILE,
            "ok: Cargo.lock is up to date (`cargo metadata --locked` changes nothing)",
        );
        return;
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    // "the lock file … needs to be updated but --locked was passed" (older cargo), "cannot
    // update the lock file … because --locked was passed" (newer).
    if stderr.contains("--locked was passed") {
        report.problem(
            LOCKFILE,
            "Cargo.lock is stale: cargo would have to update it for the current manifests (a \
             dependency or a version changed without it); run `cargo update --workspace` (or any \
             build) and commit Cargo.lock",
        );
    } else {
        report.problem(
            LOCKFILE,
            format!(
                "cargo cannot resolve the workspace from Cargo.lock (`cargo metadata --locked`): \
                 {}",
                crate::sys::last_lines(&stderr, 6)
            ),
        );
    }
}
