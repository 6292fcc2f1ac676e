//! The workspace as the release checks see it: members, versions, path dependencies between
//! members, and the order they must be published in.
//!
//! Everything comes from `cargo metadata --no-deps --format-version 1`, which reads the manifests
//! without resolving (so it neither needs the network nor rewrites `Cargo.lock`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use semver::{Version, VersionReq};
use serde_json::Value;

use super::Env;

/// How a dependency is used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DepKind {
    /// `[dependencies]`.
    Normal,
    /// `[dev-dependencies]`: kept in the published manifest only when it has a `version`.
    Dev,
    /// `[build-dependencies]`.
    Build,
}

impl DepKind {
    /// The manifest table, for messages.
    pub fn table(self) -> &'static str {
        match self {
            DepKind::Normal => "dependencies",
            DepKind::Dev => "dev-dependencies",
            DepKind::Build => "build-dependencies",
        }
    }
}

/// A dependency of one member on another member (by path).
#[derive(Clone, Debug)]
pub struct PathDep {
    /// The dependency's package name.
    pub name: String,
    /// The requirement as cargo reports it (`*` when the manifest gives no `version`).
    pub req_text: String,
    /// The parsed requirement.
    pub req: VersionReq,
    /// Whether the manifest gives a `version` (cargo reports a missing one as `*`).
    pub has_version: bool,
    /// Which table it is in.
    pub kind: DepKind,
}

impl PathDep {
    /// Whether this dependency stays in the manifest `cargo package` writes: normal and build
    /// dependencies always, dev-dependencies only with a `version` (cargo strips path-only ones).
    pub fn is_published(&self) -> bool {
        self.kind != DepKind::Dev || self.has_version
    }
}

/// One workspace member.
#[derive(Clone, Debug)]
pub struct Crate {
    /// Package name.
    pub name: String,
    /// Current version (from its manifest).
    pub version: Version,
    /// The directory holding its `Cargo.toml`.
    pub dir: PathBuf,
    /// Whether it may be published to crates.io (`publish` unset or listing `crates-io`).
    pub publish: bool,
    /// `description`, which crates.io requires.
    pub description: Option<String>,
    /// `license` or `license-file`, one of which crates.io requires.
    pub license: Option<String>,
    /// The readme file, resolved (it may live outside [`Crate::dir`]).
    pub readme: Option<PathBuf>,
    /// Path dependencies on other members.
    pub deps: Vec<PathDep>,
}

/// The workspace members and where the workspace lives.
#[derive(Clone, Debug)]
pub struct Workspace {
    /// The workspace root (the directory of the top-level `Cargo.toml`).
    pub root: PathBuf,
    /// Every member, sorted by name.
    pub crates: Vec<Crate>,
}

impl Workspace {
    /// Reads the workspace at `env.root` with `cargo metadata --no-deps`.
    pub fn load(env: &Env) -> Result<Self> {
        let mut cmd = env.cargo();
        cmd.args(["metadata", "--no-deps", "--format-version", "1"]);
        let out = crate::sys::run(&mut cmd)?;
        let json: Value = serde_json::from_str(&out).context("cargo metadata printed no JSON")?;
        Self::from_metadata(&json)
    }

    /// Builds the model from `cargo metadata` JSON.
    pub fn from_metadata(json: &Value) -> Result<Self> {
        let root = PathBuf::from(str_field(json, "workspace_root")?);
        let members: BTreeSet<&str> = json["workspace_members"]
            .as_array()
            .context("cargo metadata: no workspace_members")?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let packages: Vec<&Value> = json["packages"]
            .as_array()
            .context("cargo metadata: no packages")?
            .iter()
            .filter(|p| p["id"].as_str().is_some_and(|id| members.contains(id)))
            .collect();
        // Member directories, to recognise path dependencies on members.
        let mut dirs = BTreeMap::new();
        for p in &packages {
            let manifest = PathBuf::from(str_field(p, "manifest_path")?);
            let dir = manifest
                .parent()
                .context("manifest path without a directory")?
                .to_path_buf();
            dirs.insert(dir, str_field(p, "name")?.to_string());
        }
        let mut crates = Vec::new();
        for p in &packages {
            crates.push(parse_crate(p, &dirs)?);
        }
        crates.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Self { root, crates })
    }

    /// The member called `name`.
    pub fn get(&self, name: &str) -> Option<&Crate> {
        self.crates.iter().find(|c| c.name == name)
    }

    /// The members that are published, in no particular order.
    pub fn published(&self) -> impl Iterator<Item = &Crate> {
        self.crates.iter().filter(|c| c.publish)
    }

    /// The publishable members in publish order: every crate after the publishable members its
    /// published manifest depends on (normal, build, and versioned dev-dependencies, since
    /// crates.io wants those to exist too). The order goes level by level: first the crates that
    /// need no other, then those that need only the first level, and so on, by name within a
    /// level (any order respecting the dependencies would do; this one is stable). Fails on a
    /// cycle.
    pub fn publish_order(&self) -> Result<Vec<&Crate>> {
        let mut waiting: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for krate in self.published() {
            let after = self.publish_prerequisites(krate);
            waiting.insert(&krate.name, after);
        }
        let mut order = Vec::new();
        while !waiting.is_empty() {
            // One level: every crate whose prerequisites are all published, by name.
            let ready: Vec<&str> = waiting
                .iter()
                .filter(|(_, after)| after.is_empty())
                .map(|(name, _)| *name)
                .collect();
            if ready.is_empty() {
                let stuck: Vec<&str> = waiting.keys().copied().collect();
                bail!(
                    "the published dependencies of {} form a cycle; no publish order exists",
                    stuck.join(", ")
                );
            }
            for name in &ready {
                waiting.remove(name);
            }
            for after in waiting.values_mut() {
                after.retain(|name| !ready.contains(name));
            }
            order.extend(ready.iter().filter_map(|name| self.get(name)));
        }
        Ok(order)
    }

    /// The publishable members `krate` must be published after.
    pub fn publish_prerequisites(&self, krate: &Crate) -> BTreeSet<&str> {
        krate
            .deps
            .iter()
            .filter(|d| d.is_published() && d.name != krate.name)
            .filter_map(|d| self.get(&d.name))
            .filter(|dep| dep.publish)
            .map(|dep| dep.name.as_str())
            .collect()
    }

    /// `path` relative to the workspace root, for messages and git path specs.
    pub fn relative<'a>(&self, path: &'a Path) -> &'a Path {
        path.strip_prefix(&self.root).unwrap_or(path)
    }
}

/// One member from its `cargo metadata` package object.
fn parse_crate(p: &Value, dirs: &BTreeMap<PathBuf, String>) -> Result<Crate> {
    let name = str_field(p, "name")?.to_string();
    let version = Version::parse(str_field(p, "version")?)
        .with_context(|| format!("{name}: version is not semver"))?;
    let manifest = PathBuf::from(str_field(p, "manifest_path")?);
    let dir = manifest
        .parent()
        .context("manifest path without a directory")?
        .to_path_buf();
    let publish = match &p["publish"] {
        Value::Null => true,
        Value::Array(registries) => registries.iter().any(|r| r == "crates-io"),
        _ => false,
    };
    let text = |key: &str| {
        p[key]
            .as_str()
            .filter(|s| !s.trim().is_empty())
            .map(str::to_string)
    };
    let license = text("license").or_else(|| text("license_file"));
    let readme = text("readme").map(|r| normalize(&dir.join(r)));
    let mut deps = Vec::new();
    for d in p["dependencies"].as_array().into_iter().flatten() {
        let Some(path) = d["path"].as_str() else {
            continue;
        };
        let Some(member) = dirs.get(&normalize(Path::new(path))) else {
            continue;
        };
        let req_text = str_field(d, "req")?.to_string();
        let req = VersionReq::parse(&req_text)
            .with_context(|| format!("{name}: requirement {req_text:?} on {member}"))?;
        let kind = match d["kind"].as_str() {
            Some("dev") => DepKind::Dev,
            Some("build") => DepKind::Build,
            _ => DepKind::Normal,
        };
        deps.push(PathDep {
            name: member.clone(),
            has_version: req_text.trim() != "*",
            req_text,
            req,
            kind,
        });
    }
    Ok(Crate {
        description: text("description"),
        name,
        version,
        dir,
        publish,
        license,
        readme,
        deps,
    })
}

/// A string field of a JSON object.
fn str_field<'a>(v: &'a Value, key: &str) -> Result<&'a str> {
    v[key]
        .as_str()
        .with_context(|| format!("cargo metadata: missing {key:?}"))
}

/// `path` with `.` and `..` resolved lexically (no file system access, symlinks untouched).
pub fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}
