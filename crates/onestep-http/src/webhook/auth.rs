//! Bearer-token checks: what the options say ([`BearerAuth`]) and the compiled check.

use std::fmt;

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use onestep_core::{Error, Result};

use super::reply::Reject;

/// Requires `<header>: <scheme> <token>` on every request (default `Authorization: Bearer …`).
///
/// The scheme is compared case-insensitively, the token in constant time. A request without
/// it is answered 401 with `WWW-Authenticate: <scheme> realm="<realm>"`.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerAuth {
    /// The expected token (not empty).
    pub token: String,
    /// The header carrying it (default `authorization`).
    pub header: String,
    /// The scheme before the token (default `Bearer`).
    pub scheme: String,
    /// The realm named in the 401 challenge (default `webhook`).
    pub realm: String,
}

impl BearerAuth {
    /// `Authorization: Bearer <token>` with realm `webhook`.
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: token.into(),
            header: "authorization".to_string(),
            scheme: "Bearer".to_string(),
            realm: "webhook".to_string(),
        }
    }
}

impl fmt::Debug for BearerAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerAuth")
            .field("token", &"[redacted]")
            .field("header", &self.header)
            .field("scheme", &self.scheme)
            .field("realm", &self.realm)
            .finish()
    }
}

/// The compiled bearer check.
pub(super) struct Auth {
    /// The header carrying the token (redacted in events).
    pub(super) header: HeaderName,
    scheme: String,
    token: String,
    challenge: HeaderValue,
}

impl Auth {
    pub(super) fn compile(auth: &BearerAuth, prefix: &str) -> Result<Self> {
        let invalid = |f: &str, m: String| Error::invalid(format!("{prefix}{f}"), m);
        if auth.token.is_empty() {
            return Err(invalid("token", "must not be empty".to_string()));
        }
        if auth
            .token
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(invalid(
                "token",
                "must not contain spaces or control characters".to_string(),
            ));
        }
        let header = HeaderName::from_bytes(auth.header.trim().as_bytes()).map_err(|_| {
            invalid(
                "header",
                format!("must be a valid header name, got {:?}", auth.header),
            )
        })?;
        if auth.scheme.is_empty() || !auth.scheme.chars().all(|c| c.is_ascii_graphic()) {
            return Err(invalid(
                "scheme",
                format!("must be a non-empty word, got {:?}", auth.scheme),
            ));
        }
        let challenge = (!auth.realm.contains(['"', '\\']))
            .then(|| HeaderValue::from_str(&format!("{} realm=\"{}\"", auth.scheme, auth.realm)))
            .and_then(|v| v.ok())
            .ok_or_else(|| {
                invalid(
                    "realm",
                    format!(
                        "must be visible ASCII without quotes or backslashes, got {:?}",
                        auth.realm
                    ),
                )
            })?;
        Ok(Self {
            header,
            scheme: auth.scheme.clone(),
            token: auth.token.clone(),
            challenge,
        })
    }

    /// `Ok` when the request carries the token; else the 401 answer.
    pub(super) fn check(&self, headers: &HeaderMap) -> Result<(), Reject> {
        let presented = headers.get(&self.header).map(HeaderValue::as_bytes);
        let ok = presented.is_some_and(|value| {
            let mut split = value.splitn(2, |b| *b == b' ');
            let scheme = split.next().unwrap_or_default();
            let token = split.next().unwrap_or_default();
            !token.is_empty()
                && scheme.eq_ignore_ascii_case(self.scheme.as_bytes())
                && crate::constant_time_eq(token, self.token.as_bytes())
        });
        if ok {
            return Ok(());
        }
        Err(Reject::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!("missing or invalid {} token", self.scheme),
        )
        .header(header::WWW_AUTHENTICATE, self.challenge.clone()))
    }
}
