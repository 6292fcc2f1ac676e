//! The web dashboard: server-rendered pages over one namespace, to mount in any axum service.
//!
//! | page | shows |
//! |---|---|
//! | `{prefix}/` | counts per task and status, throughput and failures over the last hour, the backlog and its oldest waiting execution |
//! | `{prefix}/executions` | executions filtered by task, status, submission time and one metadata key, newest first, with cursor paging |
//! | `{prefix}/executions/{id}` | one execution: payload, metadata, result, error, progress, its attempts as a timeline; cancel and "submit again as new" |
//! | `{prefix}/workers` | who holds leases now: each worker's executions, attempts and last heartbeats |
//!
//! Pages refresh themselves every few seconds (a small script swaps the page body; without
//! JavaScript they are plain pages). The HTML is rendered on the server with
//! [maud](https://maud.lambda.xyz) and the only assets, a style sheet and that script, are
//! compiled into the binary, so nothing is fetched from elsewhere and no Node toolchain is
//! needed to build it.
//!
//! Safety: with [`Dashboard::bearer_token`] or [`Dashboard::basic_auth`] set, every page and
//! asset needs it (a browser signs in once with the token and keeps a session cookie, or answers
//! the basic-auth prompt); [`Dashboard::read_only`] removes the actions; actions are `POST`
//! forms carrying a per-process token and refused from another origin; pages are sent with a
//! strict Content-Security-Policy and never show a DSN or any other setting.
//!
//! ```no_run
//! use onestep_http::dashboard::Dashboard;
//! use onestep_sql::sqlite::SqliteExecutionBackend;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let backend = SqliteExecutionBackend::new("sqlite://jobs.db", Default::default())?;
//! let ui = Dashboard::new(backend, "reports")?
//!     .prefix("/ops")?
//!     .bearer_token("s3cret")
//!     .router();
//! let app = axum::Router::new().merge(ui);
//! let listener = onestep_http::bind("127.0.0.1:8080").await?;
//! onestep_http::serve(listener, app, std::future::pending()).await?;
//! # Ok(()) }
//! ```

mod auth;
mod html;
mod pages;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::routing::{get, post};
use onestep_core::execution::{ExecutionClient, ExecutionError, ExecutionInspector};

pub use auth::DashboardAuth;

/// The default time between two refreshes of a page.
pub const DEFAULT_REFRESH: Duration = Duration::from_secs(3);

/// A prefix the dashboard cannot be mounted at.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "dashboard prefix must be empty or start with '/' and hold only letters, digits, '/', '-', '_' and '.', without a trailing '/'; got {0:?}"
)]
pub struct PrefixError(String);

/// Builds the dashboard [`Router`].
pub struct Dashboard<B> {
    ui: Ui<B>,
}

/// What every page handler shares.
pub(crate) struct Ui<B> {
    pub(crate) backend: B,
    pub(crate) client: ExecutionClient<B>,
    pub(crate) namespace: String,
    pub(crate) prefix: String,
    pub(crate) read_only: bool,
    pub(crate) refresh: Duration,
    pub(crate) auth: DashboardAuth,
    /// The value of the session cookie a bearer-token sign-in sets (random per process).
    pub(crate) session: String,
    /// The token every action form carries (random per process).
    pub(crate) csrf: String,
}

fn random_secret() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

impl<B: ExecutionInspector + Clone + 'static> Dashboard<B> {
    /// A dashboard of `namespace`, at the root, with actions, without authentication.
    pub fn new(backend: B, namespace: impl Into<String>) -> Result<Self, ExecutionError> {
        let namespace = namespace.into();
        let client = ExecutionClient::new(backend.clone(), &namespace)?;
        Ok(Self {
            ui: Ui {
                backend,
                client,
                namespace: namespace.trim().to_owned(),
                prefix: String::new(),
                read_only: false,
                refresh: DEFAULT_REFRESH,
                auth: DashboardAuth::None,
                session: random_secret(),
                csrf: random_secret(),
            },
        })
    }

    /// Serves the pages under `prefix` (`""`, the default, or like `/ops`).
    pub fn prefix(mut self, prefix: &str) -> Result<Self, PrefixError> {
        let fine = |c: char| c.is_ascii_alphanumeric() || matches!(c, '/' | '-' | '_' | '.');
        let valid = prefix.is_empty()
            || (prefix.starts_with('/')
                && !prefix.ends_with('/')
                && !prefix.contains("//")
                && prefix.chars().all(fine));
        if !valid {
            return Err(PrefixError(prefix.to_owned()));
        }
        self.ui.prefix = prefix.to_owned();
        Ok(self)
    }

    /// Shows executions without the cancel and "submit again" actions (and refuses their
    /// requests with 403).
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.ui.read_only = read_only;
        self
    }

    /// How often a page refreshes itself (at least 1 s).
    pub fn refresh_every(mut self, every: Duration) -> Self {
        self.ui.refresh = every.max(Duration::from_secs(1));
        self
    }

    /// Requires `token`: as `Authorization: Bearer <token>`, or once on the sign-in page, after
    /// which the browser holds a session cookie (valid until the process restarts).
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        self.ui.auth = DashboardAuth::Bearer(token.into());
        self
    }

    /// Requires HTTP basic authentication with this user and password (the browser prompts).
    pub fn basic_auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.ui.auth = DashboardAuth::Basic {
            user: user.into(),
            password: password.into(),
        };
        self
    }

    /// The router: the pages, the actions, the sign-in page and the assets.
    pub fn router(self) -> Router {
        let ui = Arc::new(self.ui);
        let p = ui.prefix.clone();
        let at = |path: &str| format!("{p}{path}");
        let mut pages = Router::new()
            .route(&at("/"), get(pages::overview::<B>))
            .route(&at("/executions"), get(pages::executions::<B>))
            .route(&at("/executions/{id}"), get(pages::detail::<B>))
            .route(&at("/executions/{id}/cancel"), post(pages::cancel::<B>))
            .route(&at("/executions/{id}/resubmit"), post(pages::resubmit::<B>))
            .route(&at("/workers"), get(pages::workers::<B>))
            .route(&at("/assets/app.css"), get(html::stylesheet))
            .route(&at("/assets/app.js"), get(html::script));
        if !p.is_empty() {
            pages = pages.route(&p, get(pages::overview::<B>));
        }
        let pages = pages.route_layer(axum::middleware::from_fn_with_state(
            ui.clone(),
            auth::required::<B>,
        ));
        Router::new()
            .merge(pages)
            .route(
                &at("/login"),
                get(auth::login_page::<B>).post(auth::login::<B>),
            )
            .layer(axum::middleware::map_response(secure_headers))
            .with_state(ui)
    }
}

/// The headers every dashboard answer carries: a strict CSP (only this origin's script and
/// style, no framing), no sniffing, no referrer to other sites, and no caching of pages that
/// show live data.
async fn secure_headers(mut response: axum::response::Response) -> axum::response::Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        // Not `no-referrer`: with it a browser sends `Origin: null` on the action forms, which
        // the origin check refuses.
        (header::REFERRER_POLICY, "same-origin"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}
