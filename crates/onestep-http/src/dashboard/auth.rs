//! Who may see the dashboard: nobody is asked (the default), a bearer token (header, or a
//! sign-in page that sets a session cookie), or HTTP basic authentication.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine as _;
use onestep_core::execution::ExecutionInspector;

use super::Ui;
use super::html;
use crate::constant_time_eq;

/// The cookie a bearer-token sign-in sets.
pub(crate) const SESSION_COOKIE: &str = "onestep_session";

/// How the dashboard authenticates its users.
#[derive(Clone, PartialEq, Eq)]
pub enum DashboardAuth {
    /// Everyone who reaches the address sees it.
    None,
    /// `Authorization: Bearer <token>`, or the session cookie of a sign-in with the token.
    Bearer(String),
    /// HTTP basic authentication.
    Basic {
        /// The user name.
        user: String,
        /// The password.
        password: String,
    },
}

impl std::fmt::Debug for DashboardAuth {
    /// Never prints a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::None => "None",
            Self::Bearer(_) => "Bearer(..)",
            Self::Basic { .. } => "Basic(..)",
        })
    }
}

/// The value of cookie `name` in `headers`.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

impl<B> Ui<B> {
    /// Whether `headers` carry what the configured authentication asks for.
    pub(crate) fn signed_in(&self, headers: &HeaderMap) -> bool {
        let authorization = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        match &self.auth {
            DashboardAuth::None => true,
            DashboardAuth::Bearer(token) => {
                let by_header = authorization
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .is_some_and(|given| constant_time_eq(given.as_bytes(), token.as_bytes()));
                let by_cookie = cookie(headers, SESSION_COOKIE).is_some_and(|given| {
                    constant_time_eq(given.as_bytes(), self.session.as_bytes())
                });
                by_header || by_cookie
            }
            DashboardAuth::Basic { user, password } => {
                let expected =
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                authorization
                    .and_then(|v| v.strip_prefix("Basic "))
                    .is_some_and(|given| constant_time_eq(given.as_bytes(), expected.as_bytes()))
            }
        }
    }
}

/// Lets a signed-in request through; otherwise the basic-auth challenge, or (bearer) a redirect
/// of a page request to the sign-in page and 401 for anything else.
pub(crate) async fn required<B: ExecutionInspector + Clone + 'static>(
    State(ui): State<Arc<Ui<B>>>,
    request: Request,
    next: Next,
) -> Response {
    if ui.signed_in(request.headers()) {
        return next.run(request).await;
    }
    match &ui.auth {
        DashboardAuth::Basic { .. } => (
            StatusCode::UNAUTHORIZED,
            [(
                header::WWW_AUTHENTICATE,
                "Basic realm=\"onestep\", charset=\"UTF-8\"",
            )],
            "authentication required",
        )
            .into_response(),
        _ if request.method() == axum::http::Method::GET
            && !request.uri().path().contains("/assets/") =>
        {
            Redirect::to(&format!("{}/login", ui.prefix)).into_response()
        }
        _ => (StatusCode::UNAUTHORIZED, "authentication required").into_response(),
    }
}

/// The sign-in page (bearer token only; the other modes have nothing to sign in to).
pub(crate) async fn login_page<B: ExecutionInspector + Clone + 'static>(
    State(ui): State<Arc<Ui<B>>>,
) -> Response {
    match ui.auth {
        DashboardAuth::Bearer(_) => html::login(&ui.prefix, None).into_response(),
        _ => Redirect::to(&format!("{}/", ui.prefix)).into_response(),
    }
}

/// Checks the submitted token; on success sets the session cookie and goes to the overview.
pub(crate) async fn login<B: ExecutionInspector + Clone + 'static>(
    State(ui): State<Arc<Ui<B>>>,
    body: Body,
) -> Response {
    let DashboardAuth::Bearer(token) = &ui.auth else {
        return Redirect::to(&format!("{}/", ui.prefix)).into_response();
    };
    let given = match axum::body::to_bytes(body, 8192).await {
        Ok(bytes) => serde_urlencoded::from_bytes::<Vec<(String, String)>>(&bytes)
            .ok()
            .and_then(|pairs| pairs.into_iter().find(|(k, _)| k == "token"))
            .map(|(_, v)| v),
        Err(_) => None,
    };
    if !given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes())) {
        return (
            StatusCode::UNAUTHORIZED,
            html::login(&ui.prefix, Some("That token is not the dashboard's.")),
        )
            .into_response();
    }
    let path = if ui.prefix.is_empty() {
        "/"
    } else {
        &ui.prefix
    };
    let cookie = format!(
        "{SESSION_COOKIE}={}; Path={path}; HttpOnly; SameSite=Strict",
        ui.session
    );
    (
        [(header::SET_COOKIE, cookie)],
        Redirect::to(&format!("{}/", ui.prefix)),
    )
        .into_response()
}
