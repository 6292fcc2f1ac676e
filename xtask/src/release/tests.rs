//! The release checks against temporary copies of this workspace, each with one seeded mistake.
//!
//! A copy holds the files `git ls-files --cached --others --exclude-standard` lists (so no
//! `target/`, no `.git`), symlinks kept as symlinks. The checks run directly (no `cargo package`,
//! nothing is built); cargo runs `--offline`, `cargo metadata` only, after one `cargo fetch`
//! that brings every crate of `Cargo.lock` (for every platform, as `cargo metadata` reads them
//! all) into the cargo home, so the tests need no earlier command to have fetched anything.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use semver::{Version, VersionReq};

use super::checks::{self, CHANGELOG, INCLUDE_PATHS, LOCKFILE, REQUIREMENTS, TAGS};
use super::git::{self, ReleaseState};
use super::workspace::Workspace;
use super::{Env, Problem, Report, static_checks};

/// A temporary copy of the workspace.
struct Copy {
    _dir: tempfile::TempDir,
    env: Env,
    /// The problems of the unmodified copy: the seeded-mistake tests look only at problems
    /// beyond these, so that they test the check whatever state the workspace is in
    /// (`the_workspace_as_it_is_passes` is the test of that state).
    baseline: Vec<Problem>,
}

/// Runs `cargo fetch --locked` once per test process, with the network if it must: the copies'
/// offline `cargo metadata` reads the manifest of every locked crate, including other platforms'.
fn fetch_locked_crates() {
    static FETCHED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let fetched = FETCHED.get_or_init(|| {
        let env = Env::this_workspace();
        let output = env
            .cargo()
            .args(["fetch", "--locked"])
            .output()
            .map_err(|e| format!("cannot run cargo fetch: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "cargo fetch --locked failed (the release tests need crates.io or a cargo home \
                 that holds every crate of Cargo.lock):\n{}",
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    });
    if let Err(message) = fetched {
        panic!("{message}");
    }
}

impl Copy {
    /// Copies this workspace's sources.
    fn new() -> Self {
        fetch_locked_crates();
        let source = Env::this_workspace();
        let dir = tempfile::tempdir().expect("temporary directory");
        let root = dir.path().join("ws");
        let listed = run(source.git().args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ]));
        for rel in listed.split('\0').filter(|p| !p.is_empty()) {
            let from = source.root.join(rel);
            let to = root.join(rel);
            let Ok(meta) = fs::symlink_metadata(&from) else {
                continue; // deleted in the working tree
            };
            fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
            if meta.file_type().is_symlink() {
                let link = fs::read_link(&from).expect("read_link");
                std::os::unix::fs::symlink(link, &to).expect("symlink");
            } else if meta.is_file() {
                fs::copy(&from, &to).expect("copy");
            }
        }
        let env = Env {
            root,
            cargo: source.cargo,
            offline: true,
        };
        let mut copy = Self {
            _dir: dir,
            env,
            baseline: Vec::new(),
        };
        copy.baseline = copy.check_all().problems;
        copy
    }

    /// The absolute path of `rel`.
    fn path(&self, rel: &str) -> PathBuf {
        self.env.root.join(rel)
    }

    /// Rewrites `rel` with `edit`, which must change it.
    fn edit(&self, rel: &str, edit: impl FnOnce(&str) -> String) {
        let path = self.path(rel);
        let before = fs::read_to_string(&path).expect("read");
        let after = edit(&before);
        assert_ne!(before, after, "the seeded mistake did not change {rel}");
        fs::write(&path, after).expect("write");
    }

    /// Makes the copy a git repository with everything committed.
    fn commit_all(&self) {
        run(self.git().args(["init", "-q"]));
        run(self.git().args(["add", "-A"]));
        run(self.git().args(["commit", "-q", "-m", "copy"]));
    }

    /// `git` in the copy, with an identity and no signing.
    fn git(&self) -> Command {
        let mut cmd = self.env.git();
        cmd.args([
            "-c",
            "user.name=xtask",
            "-c",
            "user.email=xtask@localhost",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "tag.gpgsign=false",
        ]);
        cmd
    }

    /// The workspace model of the copy.
    fn workspace(&self) -> Workspace {
        Workspace::load(&self.env).expect("cargo metadata --no-deps")
    }

    /// Every check but packaging.
    fn check_all(&self) -> Report {
        static_checks(&self.env, &self.workspace())
    }

    /// Every check but packaging, without the problems the unmodified copy has.
    fn check(&self) -> Report {
        let mut report = self.check_all();
        report.problems.retain(|p| !self.baseline.contains(p));
        report
    }
}

/// Runs `cmd`, panicking on failure; its stdout.
fn run(cmd: &mut Command) -> String {
    crate::sys::run(cmd).unwrap_or_else(|err| panic!("{err:#}"))
}

/// All problems, one per line, for assertion messages.
fn listing(report: &Report) -> String {
    report
        .problems
        .iter()
        .map(|p| format!("{}: {}", p.check, p.message))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` with the `version = "…"` of the `[workspace.dependencies]` entry `name` set to `req`.
fn set_workspace_requirement(text: &str, name: &str, req: &str) -> String {
    let prefix = format!("{name} = {{");
    text.lines()
        .map(|line| {
            if !line.starts_with(&prefix) {
                return line.to_string();
            }
            let at = line.find("version = \"").expect("the entry has a version");
            let value_start = at + "version = \"".len();
            let value_end = value_start + line[value_start..].find('"').expect("closing quote");
            format!("{}{req}{}", &line[..value_start], &line[value_end..])
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The current version of a member.
fn version_of(ws: &Workspace, name: &str) -> Version {
    ws.get(name).expect("member").version.clone()
}

#[test]
fn the_workspace_as_it_is_passes() {
    let copy = Copy::new();
    let report = copy.check_all();
    assert!(
        report.problems.is_empty(),
        "`cargo xtask release-check` would fail on this workspace:\n{}",
        listing(&report)
    );
    let notes = report.notes.join("\n");
    // Not a git repository: the tag check says it skipped.
    assert!(notes.contains("tags: skipped"), "{notes}");
    assert!(notes.contains("lockfile: ok"), "{notes}");
}

#[test]
fn publish_order_follows_the_dependency_graph() {
    let ws = Workspace::load(&Env::this_workspace()).expect("metadata");
    let order: Vec<&str> = ws
        .publish_order()
        .expect("order")
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    let position = |name: &str| {
        order
            .iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("{name} not in {order:?}"))
    };
    assert_eq!(order[0], "onestep-core", "{order:?}");
    assert!(position("onestep-sql") < position("onestep-postgres"));
    // onestep-http's versioned dev-dependency on onestep-sql must exist on crates.io first.
    assert!(position("onestep-sql") < position("onestep-http"));
    assert_eq!(*order.last().expect("crates"), "onestep-cli", "{order:?}");
    assert!(!order.contains(&"xtask") && !order.contains(&"onestep-testkit"));
}

#[test]
fn a_requirement_that_does_not_admit_the_current_version_fails() {
    let copy = Copy::new();
    let current = version_of(&copy.workspace(), "onestep-sql");
    let next = if current.major == 0 {
        format!("0.{}", current.minor + 1)
    } else {
        format!("{}", current.major + 1)
    };
    copy.edit("Cargo.toml", |t| {
        set_workspace_requirement(t, "onestep-sql", &next)
    });
    let report = copy.check();
    let found = report.of(REQUIREMENTS);
    let expected = format!(
        "onestep-postgres [dependencies] onestep-sql = \"^{next}\" does not admit onestep-sql's \
         current version {current}"
    );
    assert!(
        found.iter().any(|m| m.starts_with(&expected)),
        "expected {expected:?} in:\n{}",
        listing(&report)
    );
    // Every published dependent is named, the dev-dependency of onestep-http included.
    for dependent in [
        "onestep-cli [dependencies]",
        "onestep-http [dev-dependencies]",
    ] {
        assert!(
            found.iter().any(|m| m.starts_with(dependent)),
            "{dependent}:\n{}",
            listing(&report)
        );
    }
}

#[test]
fn a_requirement_admitting_versions_before_the_floor_fails() {
    let copy = Copy::new();
    let current = version_of(&copy.workspace(), "onestep-core");
    let loose = format!(">=0.0.5, <{}", current.major + 1);
    copy.edit("Cargo.toml", |t| {
        set_workspace_requirement(t, "onestep-core", &loose)
    });
    let report = copy.check();
    let found = report.of(REQUIREMENTS);
    let dependents = [
        "onestep-sql",
        "onestep-postgres",
        "onestep-http",
        "onestep-cli",
        "onestep-redis",
        "onestep-rabbitmq",
        "onestep-sqs",
        "onestep-python",
    ];
    for dependent in dependents {
        let expected = format!(
            "{dependent} [dependencies] onestep-core = \"{loose}\" admits versions older than \
             0.1.0, the first onestep-core with tracked execution"
        );
        assert!(
            found.iter().any(|m| m.starts_with(&expected)),
            "expected {expected:?} in:\n{}",
            listing(&report)
        );
    }
    // The requirement still admits the current version, so that is all that is wrong.
    assert_eq!(found.len(), dependents.len(), "{}", listing(&report));
    assert!(!found.iter().any(|m| m.contains("does not admit")));
}

#[test]
fn a_missing_changelog_entry_fails() {
    let copy = Copy::new();
    let version = version_of(&copy.workspace(), "onestep-http");
    let heading = format!("## onestep-http {version}");
    copy.edit("CHANGELOG.md", |t| {
        // Drop the section: its heading and everything up to the next `## `.
        let start = t.find(&heading).expect("the section exists");
        let end = t[start + heading.len()..]
            .find("\n## ")
            .map_or(t.len(), |i| start + heading.len() + i + 1);
        format!("{}{}", &t[..start], &t[end..])
    });
    let report = copy.check();
    assert_eq!(
        report.problems.len(),
        1,
        "exactly the changelog problem:\n{}",
        listing(&report)
    );
    assert_eq!(
        report.of(CHANGELOG),
        vec![format!(
            "CHANGELOG.md has no entry for onestep-http {version}: add a `## onestep-http \
             {version}` section listing what changed"
        )]
    );
}

#[test]
fn an_empty_changelog_entry_fails() {
    let copy = Copy::new();
    let version = version_of(&copy.workspace(), "onestep-postgres");
    let heading = format!("## onestep-postgres {version}");
    copy.edit("CHANGELOG.md", |t| {
        let start = t.find(&heading).expect("the section exists") + heading.len();
        let end = t[start..].find("\n## ").map_or(t.len(), |i| start + i + 1);
        format!("{}\n\n{}", &t[..start], &t[end..])
    });
    let report = copy.check();
    let found = report.of(CHANGELOG);
    assert_eq!(found.len(), 1, "{}", listing(&report));
    assert!(found[0].contains("lists nothing"), "{}", found[0]);
}

#[test]
fn a_stale_lockfile_fails() {
    let copy = Copy::new();
    // A new dependency (already in Cargo.lock for other crates) without updating Cargo.lock.
    copy.edit("crates/onestep-postgres/Cargo.toml", |t| {
        t.replacen(
            "[dependencies]\n",
            "[dependencies]\nhex.workspace = true\n",
            1,
        )
    });
    let report = copy.check();
    assert_eq!(report.problems.len(), 1, "{}", listing(&report));
    let found = report.of(LOCKFILE);
    assert_eq!(found.len(), 1, "{}", listing(&report));
    assert!(
        found[0].starts_with("Cargo.lock is stale"),
        "{}",
        listing(&report)
    );
}

#[test]
fn a_versioned_dev_dependency_on_an_unpublished_crate_fails() {
    let copy = Copy::new();
    copy.edit("Cargo.toml", |t| {
        t.replace(
            "onestep-testkit = { path = \"crates/onestep-testkit\" }",
            "onestep-testkit = { path = \"crates/onestep-testkit\", version = \"0.1.0\" }",
        )
    });
    let report = copy.check();
    let found = report.of(REQUIREMENTS);
    assert!(
        found.iter().any(|m| m.starts_with(
            "onestep-sql [dev-dependencies] onestep-testkit = \"^0.1.0\": onestep-testkit is \
             `publish = false`; drop its `version`"
        )),
        "{}",
        listing(&report)
    );
}

#[test]
fn an_include_outside_the_crate_fails() {
    let copy = Copy::new();
    let lib = "crates/onestep-sql/src/lib.rs";
    // Seed the mistake a crate makes when it embeds a workspace file straight from its folder
    // rather than through a symlink inside the crate.
    copy.edit(lib, |t| {
        format!(
            "{t}\nconst _OUTSIDE: &str =\n    include_str!(concat!(env!(\"CARGO_MANIFEST_DIR\"), \"/../../migrations/\", \"README.md\"));\n"
        )
    });
    let report = copy.check_all();
    let found = report.of(INCLUDE_PATHS);
    assert_eq!(found.len(), 1, "{}", listing(&report));
    assert!(
        found[0].starts_with(&format!("onestep-sql: {lib}:"))
            && found[0]
                .contains("includes \"/../../migrations/README.md\", which is outside the crate"),
        "{}",
        found[0]
    );
}

#[test]
fn a_crate_changed_since_its_release_tag_needs_a_version_bump() {
    let copy = Copy::new();
    copy.commit_all();
    let ws = copy.workspace();
    let core = version_of(&ws, "onestep-core");
    let sql = version_of(&ws, "onestep-sql");
    let core_tag = git::tag_name("onestep-core", &core);
    let sql_tag = git::tag_name("onestep-sql", &sql);
    run(copy.git().args(["tag", &core_tag]));
    run(copy.git().args(["tag", "-a", "-m", "release", &sql_tag]));

    // Tagged and untouched: fine.
    let report = copy.check();
    assert!(report.problems.is_empty(), "{}", listing(&report));
    let tags = git::tags(&copy.env).expect("tags");
    let state = |ws: &Workspace, name: &str| {
        git::release_state(&copy.env, ws, ws.get(name).expect("member"), &tags).expect("state")
    };
    assert_eq!(
        state(&ws, "onestep-core"),
        ReleaseState::Unchanged {
            tag: core_tag.clone()
        }
    );
    assert_eq!(state(&ws, "onestep-http"), ReleaseState::Unreleased);

    // A change in the crate, uncommitted: the mistake.
    copy.edit("crates/onestep-core/src/lib.rs", |t| {
        format!("{t}\n// changed\n")
    });
    // The top-level migrations belong to onestep-sql through its `migrations` symlink.
    copy.edit("migrations/postgres/execution_tables.sql", |t| {
        format!("{t}\n-- changed\n")
    });
    let report = copy.check();
    let found = report.of(TAGS);
    assert_eq!(found.len(), 2, "{}", listing(&report));
    assert_eq!(
        found[0],
        format!(
            "onestep-core changed since {core_tag} (crates/onestep-core/src/lib.rs) but its \
             version is still {core}; bump it (and add a CHANGELOG entry)"
        )
    );
    assert!(
        found[1].starts_with(&format!(
            "onestep-sql changed since {sql_tag} (migrations/postgres/execution_tables.sql)"
        )),
        "{}",
        found[1]
    );

    // Bumped: the tag check is satisfied (the changelog and Cargo.lock then need updating, which
    // their own checks report).
    let bumped = Version::new(core.major, core.minor, core.patch + 1);
    copy.edit("crates/onestep-core/Cargo.toml", |t| {
        t.replace(
            "\nversion.workspace = true",
            &format!("\nversion = \"{bumped}\""),
        )
    });
    let ws = copy.workspace();
    assert!(matches!(
        state(&ws, "onestep-core"),
        ReleaseState::Bumped { ref from, ref changed, .. }
            if *from == core && changed.contains(&"crates/onestep-core/src/lib.rs".to_string())
    ));
    let report = copy.check();
    assert_eq!(report.of(TAGS).len(), 1, "{}", listing(&report));
    assert!(
        report.of(CHANGELOG)[0].contains(&format!("onestep-core {bumped}")),
        "{}",
        listing(&report)
    );
    assert!(
        report.of(LOCKFILE)[0].starts_with("Cargo.lock is stale"),
        "{}",
        listing(&report)
    );

    // Lower than the tag.
    let mut ws = ws;
    if let Some(c) = ws.crates.iter_mut().find(|c| c.name == "onestep-sql") {
        c.version = Version::new(0, 0, 1);
    }
    assert!(matches!(
        state(&ws, "onestep-sql"),
        ReleaseState::Backwards { .. }
    ));
}

#[test]
fn release_plan_lists_the_crates_in_order() {
    let copy = Copy::new();
    copy.commit_all();
    let ws = copy.workspace();
    let report = copy.check();
    let text = super::plan::render(&copy.env, &ws, &report).expect("plan");
    let core = text.find("1. onestep-core").expect("core first");
    let cli = text.find("onestep-cli ").expect("cli listed");
    assert!(core < cli, "{text}");
    assert!(text.contains("unreleased → 0.1.0") || text.contains("unreleased →"));
    assert!(
        text.contains("Not published (publish = false): onestep-docs, onestep-testkit, xtask"),
        "{text}"
    );
    assert!(text.contains("cargo publish -p onestep-core && git tag onestep-core-v"));
}

#[test]
fn lowest_admitted_versions() {
    let lowest = |req: &str| checks::lowest_admitted(&VersionReq::parse(req).expect(req));
    let v = |s: &str| Version::parse(s).expect(s);
    assert_eq!(lowest("0.1.0"), v("0.1.0"));
    assert_eq!(lowest("^0.1"), v("0.1.0"));
    assert_eq!(lowest("~0.1.2"), v("0.1.2"));
    assert_eq!(lowest("=0.1.3"), v("0.1.3"));
    assert_eq!(lowest("0.1.*"), v("0.1.0"));
    assert_eq!(lowest("*"), v("0.0.0"));
    assert_eq!(lowest("<0.3"), v("0.0.0"));
    assert_eq!(lowest(">=0.0.5, <1"), v("0.0.5"));
    assert_eq!(lowest(">0.0.9"), v("0.0.10"));
    assert_eq!(lowest(">0.0"), v("0.1.0"));
    assert_eq!(lowest(">0"), v("1.0.0"));
    assert_eq!(lowest(">=0.1.0-alpha.1"), v("0.1.0-alpha.1"));
    assert!(lowest(">=0.1.0-alpha.1") < v("0.1.0"));
}

#[test]
fn changelog_sections_and_items() {
    let text = "# Changelog\n\nIntro.\n\n## a 0.2.0 (2026-01-02)\n\n- one\n  continued\n\
                ### Fixed\n- two\n\n## b v1.0.0\n\nProse only.\n\n## not-a-version x\n\
                - ignored\n\n## c 0.1.0\n";
    let entries = checks::parse_changelog(text);
    let summary: Vec<(String, String, Vec<String>)> = entries
        .into_iter()
        .map(|e| (e.krate, e.version.to_string(), e.items))
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "a".into(),
                "0.2.0".into(),
                vec!["one continued".into(), "two".into()]
            ),
            ("b".into(), "1.0.0".into(), vec![]),
            ("c".into(), "0.1.0".into(), vec![]),
        ]
    );
}

#[test]
fn include_macros_are_found_with_their_base() {
    let text = r#"
// include_str!("/ignored/in/a/comment")
const A: &str = include_str!("../data/a.json");
macro_rules! ddl {
    ($file:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../migrations/",
            $file
        ))
    };
}
const B: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/generated.bin"));
"#;
    let found = checks::find_includes(text);
    assert_eq!(
        found,
        vec![
            checks::Include {
                line: 3,
                literal: "../data/a.json".into(),
                from_manifest_dir: false
            },
            checks::Include {
                line: 6,
                literal: "/../../migrations/".into(),
                from_manifest_dir: true
            },
        ]
    );
}

#[test]
fn crate_paths_follow_readmes_and_symlinks_out_of_the_crate() {
    let ws = Workspace::load(&Env::this_workspace()).expect("metadata");
    let core = ws.get("onestep-core").expect("core");
    let paths = git::crate_paths(&ws, core);
    assert!(paths.contains(&PathBuf::from("crates/onestep-core")));
    assert!(paths.contains(&PathBuf::from("README.md")), "{paths:?}");
    let sql = ws.get("onestep-sql").expect("sql");
    if sql.dir.join("migrations").is_symlink() {
        assert!(
            git::crate_paths(&ws, sql).contains(&PathBuf::from("migrations")),
            "{paths:?}"
        );
    }
    assert!(Path::new(&ws.root).join("CHANGELOG.md").is_file());
}
