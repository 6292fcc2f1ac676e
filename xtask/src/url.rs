//! Database URLs (`scheme://user:password@host:port/database?query`): just enough parsing to
//! drive the command-line clients, swap the database and print a URL without its password.

use std::fmt;

use anyhow::{Context, Result, bail};

/// A database server URL, split into parts. Parts are kept percent-encoded as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbUrl {
    /// The scheme as written (`postgres`, `postgresql+psycopg`, `mysql`, …).
    scheme: String,
    /// The user name ("" when absent).
    user: String,
    /// The password, if the URL has one.
    password: Option<String>,
    /// The host: a name, an address, `[v6]`, or a percent-encoded socket directory.
    host: String,
    /// The port, if given.
    port: Option<u16>,
    /// The database ("" when absent).
    database: String,
    /// The query string without `?`, if any.
    query: Option<String>,
}

impl DbUrl {
    /// Parses `raw`; fails on anything that is not `scheme://…`.
    pub fn parse(raw: &str) -> Result<Self> {
        let raw = raw.trim();
        let Some((scheme, rest)) = raw.split_once("://") else {
            bail!(
                "expected scheme://user@host:port/database, got {}",
                redact(raw)
            );
        };
        let (rest, query) = match rest.split_once('?') {
            Some((r, q)) => (r, Some(q.to_string())),
            None => (rest, None),
        };
        let (authority, database) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (u, h),
            None => ("", authority),
        };
        let (user, password) = match userinfo.split_once(':') {
            Some((u, p)) => (u.to_string(), Some(p.to_string())),
            None => (userinfo.to_string(), None),
        };
        let (host, port) = split_host_port(hostport)
            .with_context(|| format!("bad host or port in {}", redact(raw)))?;
        Ok(Self {
            scheme: scheme.to_string(),
            user,
            password,
            host,
            port,
            database: database.to_string(),
            query,
        })
    }

    /// A URL from parts (`password` and `database` unencoded; `host` may be a socket directory).
    pub fn new(
        scheme: &str,
        user: &str,
        password: Option<&str>,
        host: &str,
        port: Option<u16>,
        database: &str,
    ) -> Self {
        let host = if host.contains(':') && !host.starts_with('[') && !host.starts_with('/') {
            format!("[{host}]")
        } else {
            encode(host)
        };
        Self {
            scheme: scheme.to_string(),
            user: encode(user),
            password: password.map(encode),
            host,
            port,
            database: encode(database),
            query: None,
        }
    }

    /// The same URL with the query `key=value` appended (`value` unencoded).
    pub fn with_query(mut self, key: &str, value: &str) -> Self {
        let pair = format!("{key}={}", encode(value));
        self.query = Some(match self.query.take() {
            Some(q) if !q.is_empty() => format!("{q}&{pair}"),
            _ => pair,
        });
        self
    }

    /// The same URL pointing at database `name`.
    pub fn with_database(&self, name: &str) -> Self {
        Self {
            database: encode(name),
            ..self.clone()
        }
    }

    /// The scheme without any `+driver` suffix, lowercased.
    pub fn base_scheme(&self) -> String {
        let base = self.scheme.split('+').next().unwrap_or_default();
        base.to_ascii_lowercase()
    }

    /// The user name, decoded.
    pub fn user(&self) -> String {
        decode(&self.user)
    }

    /// The password, decoded.
    pub fn password(&self) -> Option<String> {
        self.password.as_deref().map(decode)
    }

    /// The host, decoded and without IPv6 brackets ("" when absent).
    pub fn host(&self) -> String {
        let host = decode(&self.host);
        match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            Some(inner) => inner.to_string(),
            None => host,
        }
    }

    /// The port, if given.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// The database, decoded.
    pub fn database(&self) -> String {
        decode(&self.database)
    }

    /// The decoded value of query parameter `key`, if present.
    pub fn query_param(&self, key: &str) -> Option<String> {
        self.query
            .as_deref()?
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| decode(v))
    }

    /// The URL with its password (if any) shown as `***`.
    pub fn redacted(&self) -> String {
        self.render(true)
    }

    /// Renders the URL, optionally hiding the password.
    fn render(&self, hide_password: bool) -> String {
        let mut out = format!("{}://", self.scheme);
        if !self.user.is_empty() || self.password.is_some() {
            out.push_str(&self.user);
            if let Some(password) = &self.password {
                out.push(':');
                out.push_str(if hide_password { "***" } else { password });
            }
            out.push('@');
        }
        out.push_str(&self.host);
        if let Some(port) = self.port {
            out.push_str(&format!(":{port}"));
        }
        out.push('/');
        out.push_str(&self.database);
        if let Some(query) = &self.query {
            out.push('?');
            out.push_str(query);
        }
        out
    }
}

impl fmt::Display for DbUrl {
    /// The full URL, password included: for handing to tests, never for printing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(false))
    }
}

/// Splits `host[:port]` (with `[v6]:port` support).
fn split_host_port(hostport: &str) -> Result<(String, Option<u16>)> {
    let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
        let Some((inner, after)) = rest.split_once(']') else {
            bail!("unclosed [ in host {hostport:?}");
        };
        (format!("[{inner}]"), after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (hostport.to_string(), None),
        }
    };
    let port = match port {
        Some(p) if !p.is_empty() => Some(p.parse().with_context(|| format!("bad port {p:?}"))?),
        _ => None,
    };
    Ok((host, port))
}

/// Best-effort redaction of a string that did not parse as a URL: drops everything before `@`.
fn redact(raw: &str) -> String {
    match raw.rsplit_once('@') {
        Some((_, after)) => format!("…@{after}"),
        None => raw.to_string(),
    }
}

/// Percent-encodes everything but unreserved characters.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Decodes `%XX` escapes (malformed escapes are kept as written).
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(value)) => {
                out.push(value);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::DbUrl;

    /// Parts come out decoded, and the password never shows in the redacted form.
    #[test]
    fn parses_and_redacts() -> anyhow::Result<()> {
        let url = DbUrl::parse("mysql://app:p%40ss@127.0.0.1:3307/app_test?ssl-mode=DISABLED")?;
        assert_eq!(url.user(), "app");
        assert_eq!(url.password().as_deref(), Some("p@ss"));
        assert_eq!(url.host(), "127.0.0.1");
        assert_eq!(url.port(), Some(3307));
        assert_eq!(url.database(), "app_test");
        assert_eq!(url.query_param("ssl-mode").as_deref(), Some("DISABLED"));
        assert_eq!(
            url.with_database("other").redacted(),
            "mysql://app:***@127.0.0.1:3307/other?ssl-mode=DISABLED"
        );
        assert_eq!(
            url.to_string(),
            "mysql://app:p%40ss@127.0.0.1:3307/app_test?ssl-mode=DISABLED"
        );
        Ok(())
    }

    /// Socket directories, IPv6 hosts and URLs without user or port round-trip.
    #[test]
    fn builds_socket_and_v6_urls() -> anyhow::Result<()> {
        let socket = DbUrl::new(
            "postgres",
            "postgres",
            None,
            "/tmp/x y",
            Some(5),
            "postgres",
        );
        assert_eq!(
            socket.to_string(),
            "postgres://postgres@%2Ftmp%2Fx%20y:5/postgres"
        );
        assert_eq!(DbUrl::parse(&socket.to_string())?.host(), "/tmp/x y");
        let v6 = DbUrl::parse("postgresql+psycopg://[::1]:5432/db")?;
        assert_eq!(v6.host(), "::1");
        assert_eq!(v6.base_scheme(), "postgresql");
        assert_eq!(v6.user(), "");
        assert!(DbUrl::parse("not a url").is_err());
        Ok(())
    }
}
