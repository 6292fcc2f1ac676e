//! Real PostgreSQL and MariaDB servers for `cargo xtask test`.
//!
//! For each server kind, in order: the URL in `ONESTEP_POSTGRES_URL` / `ONESTEP_MYSQL_URL`; else
//! the local default server (PostgreSQL at 127.0.0.1:5432 as `postgres` with trust auth, MariaDB
//! at 127.0.0.1:3306 as `root` without password) when it answers; else a throwaway server that
//! xtask installs (apt-get), starts on a free port of 127.0.0.1 in a temp directory, and stops.
//! `--throwaway-servers` goes straight to the last. Every run gets a fresh database on each
//! server, exported to the tests and dropped afterwards. A server that cannot be had is an error
//! that says what was tried.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};

use crate::cleanup::{Action, Cleanup};
use crate::kind::{Kind, Started};
use crate::url::DbUrl;
use crate::{sys, throwaway};

/// The command-line flag that forces throwaway servers.
pub const THROWAWAY_FLAG: &str = "--throwaway-servers";

/// How `cargo xtask test` gets its servers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Skip the URLs and local default servers; always start throwaway servers.
    pub throwaway: bool,
}

impl Options {
    /// Takes xtask's own flags out of `args` (up to a bare `--`); the rest goes to `cargo test`.
    pub fn from_args(args: Vec<String>) -> (Self, Vec<String>) {
        let mut options = Self::default();
        let mut rest = Vec::with_capacity(args.len());
        let mut passthrough = false;
        for arg in args {
            if passthrough {
                rest.push(arg);
                continue;
            }
            if arg == "--" {
                passthrough = true;
                rest.push(arg);
            } else if arg == THROWAWAY_FLAG {
                options.throwaway = true;
            } else {
                rest.push(arg);
            }
        }
        (options, rest)
    }
}

/// The servers of one test run: the variables for the tests and everything to undo afterwards.
pub struct Servers {
    /// `ONESTEP_*_URL` variables pointing at the fresh databases.
    env: Vec<(&'static str, String)>,
    /// Undo steps (dropped databases, stopped servers, removed temp directory).
    cleanup: Cleanup,
}

impl Servers {
    /// Finds or starts a server of each of `kinds` and creates a fresh database on each.
    pub fn provide(options: Options, kinds: &[Kind]) -> Result<Self> {
        let cleanup = Cleanup::new()?;
        let root = sys::is_root()?;

        let mut servers = Vec::new();
        let mut needed = Vec::new();
        for &kind in kinds {
            let mut tried = Vec::new();
            match look_up(kind, options, &mut tried)? {
                Some(server) => servers.push((kind, server, true)),
                None => needed.push((kind, tried)),
            }
        }
        if !needed.is_empty() {
            servers.extend(start_throwaways(&needed, root, &cleanup)?);
        }
        servers.sort_by_key(|(kind, ..)| Kind::ALL.iter().position(|k| k == kind));

        let mut env = Vec::new();
        for (kind, server, shared) in servers {
            if !kind.has_databases() {
                println!(
                    "xtask: {}: {} -> {}",
                    kind.id(),
                    server.description,
                    server.tests.redacted()
                );
                env.push((kind.url_var(), server.tests.to_string()));
                continue;
            }
            let name = format!("onestep_test_{}", sys::random_hex(6)?);
            if shared {
                // Recorded first, so that even a half-finished run leaves nothing behind.
                cleanup.push(Action::DropDatabase {
                    kind,
                    admin: server.admin.to_string(),
                    name: name.clone(),
                })?;
            }
            kind.create_database(&server.admin, &name, server.owner.as_deref())
                .with_context(|| {
                    format!(
                        "could not create the test database on {}",
                        server.description
                    )
                })?;
            let url = server.tests.with_database(&name);
            println!(
                "xtask: {}: {} -> {}",
                kind.id(),
                server.description,
                url.redacted()
            );
            env.push((kind.url_var(), url.to_string()));
        }
        Ok(Self { env, cleanup })
    }

    /// The variables to give `cargo test`.
    pub fn env(&self) -> &[(&'static str, String)] {
        &self.env
    }

    /// The URL of the fresh database on the server of `kind`.
    pub fn url(&self, kind: Kind) -> Result<String> {
        self.env
            .iter()
            .find(|(var, _)| *var == kind.url_var())
            .map(|(_, url)| url.clone())
            .with_context(|| format!("no {} server was provided", kind.label()))
    }

    /// Drops the databases, stops throwaway servers and removes the temp directory.
    pub fn finish(self) -> Result<()> {
        self.cleanup.run()
    }
}

/// Looks for an existing server of `kind`: the URL variable, then the local default. `None`
/// means a throwaway server is needed; `tried` then says what was tried, for error messages.
fn look_up(kind: Kind, options: Options, tried: &mut Vec<String>) -> Result<Option<Started>> {
    let var = kind.url_var();
    if options.throwaway {
        tried.push(format!(
            "{THROWAWAY_FLAG} given, so {var} and the local default server were skipped"
        ));
        return Ok(None);
    }
    match std::env::var(var) {
        Ok(raw) if !raw.trim().is_empty() => {
            // An explicit URL is never second-guessed: if it does not work, that is the error.
            let url = DbUrl::parse(&raw).with_context(|| format!("{var} is not a usable URL"))?;
            if !kind.schemes().contains(&url.base_scheme().as_str()) {
                bail!("{var}={} is not a {} URL", url.redacted(), kind.label());
            }
            ensure_client(kind)?;
            kind.check(&url).with_context(|| {
                format!(
                    "{var}={} is set, but that server cannot be used",
                    url.redacted()
                )
            })?;
            return Ok(Some(Started {
                admin: url.clone(),
                tests: url,
                owner: None,
                description: format!("server from {var}"),
            }));
        }
        _ => tried.push(format!("{var}: not set")),
    }

    let addr = kind.local_addr();
    if let Err(err) = sys::tcp_answers(addr) {
        tried.push(format!("local default server at {addr}: {err}"));
        return Ok(None);
    }
    if let Err(err) = ensure_client(kind) {
        tried.push(format!(
            "local default server at {addr}: answers, but {err:#}"
        ));
        return Ok(None);
    }
    let mut refusals = Vec::new();
    for admin in kind.local_admin_urls() {
        match kind.check(&admin) {
            Ok(()) => {
                return Ok(Some(Started {
                    tests: admin.clone(),
                    admin,
                    owner: None,
                    description: format!("local default server at {addr}"),
                }));
            }
            Err(err) => refusals.push(format!("{err:#}")),
        }
    }
    let refusals = refusals.join("; ");
    eprintln!(
        "xtask: the local {} server at {addr} answers but cannot be used: {refusals}",
        kind.label()
    );
    tried.push(format!(
        "local default server at {addr}: answers, but {refusals}"
    ));
    Ok(None)
}

/// Installs the command-line client of `kind` if it is missing.
fn ensure_client(kind: Kind) -> Result<()> {
    if kind.client_installed() {
        return Ok(());
    }
    sys::apt_install(
        kind.client_packages(),
        &format!(
            "the {} client `{}` is missing",
            kind.label(),
            kind.client_name()
        ),
    )?;
    if !kind.client_installed() {
        bail!(
            "`{}` is still missing after installing {}",
            kind.client_name(),
            kind.client_packages().join(" ")
        );
    }
    Ok(())
}

/// Starts a throwaway server for each of `needed` (in parallel), in one fresh temp directory.
fn start_throwaways(
    needed: &[(Kind, Vec<String>)],
    root: bool,
    cleanup: &Cleanup,
) -> Result<Vec<(Kind, Started, bool)>> {
    // What went wrong, with everything tried before, for servers that cannot be had.
    let failure = |kinds: &[Kind], err: anyhow::Error| {
        let mut lines = Vec::new();
        for (kind, tried) in needed.iter().filter(|(k, _)| kinds.contains(k)) {
            lines.push(format!(
                "could not provide a {} server for the tests; tried:",
                kind.label()
            ));
            lines.extend(tried.iter().map(|t| format!("  - {t}")));
            lines.push("  - a throwaway server: see below".to_string());
        }
        lines.push(format!("{err:#}"));
        anyhow!(lines.join("\n"))
    };
    let all: Vec<Kind> = needed.iter().map(|(kind, _)| *kind).collect();

    // Packages first, in one apt-get call (two at once would fight over the dpkg lock).
    let missing: Vec<&str> = needed
        .iter()
        .filter(|(kind, _)| !kind.server_installed())
        .flat_map(|(kind, _)| kind.server_packages().iter().copied())
        .collect();
    if !missing.is_empty() {
        let why = "throwaway database servers need their packages";
        sys::apt_install(&missing, why).map_err(|err| failure(&all, err))?;
    }
    if root {
        for kind in &all {
            sys::ensure_system_user(kind.system_user()).map_err(|err| failure(&[*kind], err))?;
        }
    }

    let dir = std::env::temp_dir().join(format!("onestep-xtask-{}", sys::random_hex(6)?));
    cleanup.push(Action::RemoveDir { path: dir.clone() })?;
    std::fs::create_dir(&dir)
        .with_context(|| format!("could not create the temp directory {}", dir.display()))
        .and_then(|()| {
            // The servers run as their own users and must be able to enter it.
            sys::set_mode(&dir, 0o755)
        })
        .map_err(|err| failure(&all, err))?;
    let started = Instant::now();
    let results: Vec<(Kind, Result<(Started, Duration)>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = needed
            .iter()
            .map(|&(kind, _)| {
                let dir = dir.join(kind.id());
                let handle = scope.spawn(move || {
                    let started = Instant::now();
                    let server = start_throwaway(kind, &dir, root, cleanup)?;
                    Ok((server, started.elapsed()))
                });
                (kind, handle)
            })
            .collect();
        handles
            .into_iter()
            .map(|(kind, handle)| {
                let result = handle
                    .join()
                    .unwrap_or_else(|_| Err(anyhow!("starting the server panicked")));
                (kind, result)
            })
            .collect()
    });

    let mut servers = Vec::new();
    for ((kind, result), (_, tried)) in results.into_iter().zip(needed) {
        let (mut server, took) = result
            .with_context(|| format!("starting a throwaway {} server failed", kind.label()))
            .map_err(|err| failure(&[kind], err))?;
        server.description = format!(
            "{} in {}, started in {:.1}s [{}]",
            server.description,
            dir.join(kind.id()).display(),
            took.as_secs_f64(),
            tried.join("; ")
        );
        servers.push((kind, server, false));
    }
    eprintln!(
        "xtask: throwaway servers ready in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(servers)
}

/// Starts a throwaway server of `kind` with its files in `dir`.
fn start_throwaway(kind: Kind, dir: &Path, root: bool, cleanup: &Cleanup) -> Result<Started> {
    match kind {
        Kind::Postgres => throwaway::postgres::start_throwaway(dir, root, cleanup),
        Kind::Mariadb => throwaway::mariadb::start_throwaway(dir, root, cleanup, false),
        Kind::MariadbBinlog => throwaway::mariadb::start_throwaway(dir, root, cleanup, true),
        Kind::Redis => throwaway::redis::start_throwaway(dir, root, cleanup),
        Kind::Rabbitmq => throwaway::rabbitmq::start_throwaway(dir, root, cleanup),
        Kind::Sqs => throwaway::sqs::start_throwaway(dir, root, cleanup),
    }
}
