//! Connection strings: the reference's SQLAlchemy spellings, and redaction.

use std::fmt;

/// A connection string that never prints its password.
#[derive(Clone, PartialEq, Eq)]
pub struct Dsn {
    url: String,
}

impl Dsn {
    /// Accepts sqlx URLs and the reference's SQLAlchemy spellings (`postgresql+psycopg://`,
    /// `mysql+pymysql://`, `mysql+asyncmy://`, `sqlite+aiosqlite://`): the `+driver` part is
    /// dropped. For `sqlite+…:///relative.db` the SQLAlchemy meaning (a relative path) is kept.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let raw = raw.trim();
        if raw.is_empty() {
            return Err("dsn must be a non-empty string".into());
        }
        let Some((scheme, rest)) = raw.split_once(':') else {
            // Not echoed: a value without a scheme may be a bare password.
            return Err("dsn must start with a scheme such as postgres://".into());
        };
        let (base, driver) = match scheme.split_once('+') {
            Some((base, driver)) => (base, Some(driver)),
            None => (scheme, None),
        };
        let base = match base.to_ascii_lowercase().as_str() {
            "postgresql" | "postgres" => "postgres",
            "mysql" | "mariadb" => "mysql",
            "sqlite" => "sqlite",
            other => {
                return Err(format!(
                    "unsupported dsn scheme {other:?}; expected postgres, mysql or sqlite"
                ));
            }
        };
        if base != "sqlite" && !rest.starts_with("//") {
            // Without `//` a driver reads the whole rest, password included, as a path (the
            // database name), which the server then echoes in its error.
            return Err(format!(
                "dsn must look like {base}://user:password@host/database, got {}",
                redact(raw)
            ));
        }
        let url = if base == "sqlite" && driver.is_some() {
            // SQLAlchemy: sqlite:///relative.db, sqlite:////absolute.db
            match rest.strip_prefix("///") {
                Some(path) if path.starts_with('/') => format!("sqlite://{path}"),
                Some(path) => format!("sqlite:{path}"),
                None => format!("sqlite:{rest}"),
            }
        } else if base == "postgres" {
            format!("{base}:{}", known_postgres_parameters(rest))
        } else {
            format!("{base}:{rest}")
        };
        Ok(Self { url })
    }

    /// The URL to hand to sqlx.
    pub fn as_url(&self) -> &str {
        &self.url
    }

    /// The scheme (`postgres`, `mysql`, `sqlite`).
    pub fn scheme(&self) -> &str {
        self.url.split(':').next().unwrap_or("")
    }

    /// The URL with its password replaced by `***`.
    pub fn redacted(&self) -> String {
        redact(&self.url)
    }
}

/// The query parameters sqlx's PostgreSQL driver reads (sqlx-postgres 0.8 `parse.rs`).
const POSTGRES_PARAMETERS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// Drops the query parameters of a PostgreSQL URL that the driver would ignore (libpq ones such
/// as `connect_timeout`, often found in a DSN shared with the Python side), with a warning that
/// names the key but never its value: the driver's own warning logs the value, which for a
/// misspelled `passwd=` is a password.
fn known_postgres_parameters(rest: &str) -> String {
    let Some((base, query)) = rest.split_once('?') else {
        return rest.to_string();
    };
    if query.contains('@') {
        // The `?` is inside the credentials (an unencoded `?` in a password), not a query:
        // leave the URL to the driver's error, which `redact` covers, and log nothing of it.
        return rest.to_string();
    }
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let key = pair.split('=').next().unwrap_or_default();
            let known = POSTGRES_PARAMETERS.contains(&key);
            if !known && !key.is_empty() {
                tracing::warn!(parameter = %key, "ignoring a PostgreSQL dsn parameter the driver does not read (its value is not logged)");
            }
            known
        })
        .collect();
    if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    }
}

/// Replaces the password of a URL (`user:secret@host`) and `password=` query values with `***`.
pub fn redact(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(span) = password_span(url) {
        out.replace_range(span, "***");
    }
    let lower = out.to_ascii_lowercase();
    let mut result = String::with_capacity(out.len());
    let mut i = 0;
    while let Some(pos) = lower[i..].find("password=") {
        let value_start = i + pos + "password=".len();
        result.push_str(&out[i..value_start]);
        result.push_str("***");
        i = out[value_start..]
            .find('&')
            .map_or(out.len(), |e| value_start + e);
    }
    result.push_str(&out[i..]);
    result
}

/// Where the password of `url` is: after the user name's `:`, up to the `@` before the host.
///
/// Errs on the side of hiding, because malformed DSNs are the ones printed in errors: a password
/// holding an unencoded `/`, `?`, `#` or `@` (which ends the authority early for a URL parser), a
/// URL without `//`, and a bare `user:password@host` all count. The price is that a URL with a
/// port, no user info and an `@` later on (`postgres://h:5432/db?x=a@b`) prints as
/// `postgres://h:***@b`.
fn password_span(url: &str) -> Option<std::ops::Range<usize>> {
    let colon = url.find(':')?;
    let after = &url[colon + 1..];
    let slashes = after.len() - after.trim_start_matches('/').len();
    let start = colon + 1 + slashes;
    let rest = &url[start..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = match rest[..authority_end].rfind('@') {
        Some(at) => at,
        // `user:pa/ss@host`: the authority seems to end inside the password.
        None if rest[..authority_end].contains(':')
            && !url[..colon].eq_ignore_ascii_case("sqlite") =>
        {
            let first = authority_end + rest[authority_end..].find('@')?;
            let host_end = rest[first..]
                .find(['/', '?', '#'])
                .map_or(rest.len(), |i| first + i);
            rest[..host_end].rfind('@')?
        }
        None => return None,
    };
    match rest[..at].find(':') {
        Some(c) => Some(start + c + 1..start + at),
        // `user:password@host` without a scheme: the part before the first `:` is the user.
        None if slashes == 0 => Some(start..start + at),
        None => None,
    }
}

impl fmt::Debug for Dsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Dsn").field(&self.redacted()).finish()
    }
}

impl fmt::Display for Dsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_spellings_are_normalized() {
        assert_eq!(
            Dsn::parse("postgresql+psycopg://u:p@h/db")
                .unwrap()
                .as_url(),
            "postgres://u:p@h/db"
        );
        assert_eq!(
            Dsn::parse("mysql+asyncmy://root@127.0.0.1:3306/test")
                .unwrap()
                .as_url(),
            "mysql://root@127.0.0.1:3306/test"
        );
        assert_eq!(
            Dsn::parse("mysql+pymysql://root@h/test").unwrap().scheme(),
            "mysql"
        );
        assert_eq!(
            Dsn::parse("sqlite+aiosqlite:///jobs.db").unwrap().as_url(),
            "sqlite:jobs.db"
        );
        assert_eq!(
            Dsn::parse("sqlite+aiosqlite:////var/lib/jobs.db")
                .unwrap()
                .as_url(),
            "sqlite:///var/lib/jobs.db"
        );
        assert_eq!(
            Dsn::parse("sqlite://jobs.db").unwrap().as_url(),
            "sqlite://jobs.db"
        );
        assert!(
            Dsn::parse("oracle://x")
                .unwrap_err()
                .contains("unsupported dsn scheme")
        );
        assert_eq!(
            Dsn::parse("  ").unwrap_err(),
            "dsn must be a non-empty string"
        );
        assert_eq!(
            Dsn::parse("postgresql:u:s3cr3t@h/db").unwrap_err(),
            "dsn must look like postgres://user:password@host/database, got postgresql:u:***@h/db"
        );
        assert!(Dsn::parse("mysql+pymysql:/u:s3cr3t@h/db").is_err());
    }

    #[test]
    fn postgres_parameters_the_driver_ignores_are_dropped() {
        let dsn = Dsn::parse(
            "postgresql+psycopg://u:p@h/db?sslmode=require&passwd=secret&connect_timeout=5&application_name=api",
        )
        .unwrap();
        assert_eq!(
            dsn.as_url(),
            "postgres://u:p@h/db?sslmode=require&application_name=api"
        );
        assert_eq!(
            Dsn::parse("postgres://u:pa?ss@h/db").unwrap().as_url(),
            "postgres://u:pa?ss@h/db",
            "a `?` inside the credentials is not a query"
        );
        assert_eq!(
            Dsn::parse("postgres://u@h/db?passwd=secret")
                .unwrap()
                .as_url(),
            "postgres://u@h/db"
        );
        assert_eq!(
            Dsn::parse("mysql://u@h/db?foo=bar").unwrap().as_url(),
            "mysql://u@h/db?foo=bar",
            "other dialects are left to their driver"
        );
    }

    #[test]
    fn passwords_never_print() {
        let dsn = Dsn::parse(
            "postgresql://app:s3cr3t@db.internal:5432/jobs?sslmode=require&password=other",
        )
        .unwrap();
        for shown in [format!("{dsn:?}"), dsn.to_string(), dsn.redacted()] {
            assert!(
                !shown.contains("s3cr3t") && !shown.contains("other"),
                "{shown}"
            );
            assert!(shown.contains("app:***@db.internal"), "{shown}");
        }
        assert_eq!(
            redact("mysql://root@localhost/test"),
            "mysql://root@localhost/test"
        );
    }

    #[test]
    fn passwords_of_malformed_urls_never_print() {
        for (url, shown) in [
            ("postgres://u:s3cr3t#x@h/db", "postgres://u:***@h/db"),
            (
                "postgres://u:s3/cr3t@h:5432/db",
                "postgres://u:***@h:5432/db",
            ),
            ("mysql://u:s3?cr@3t@h/db?a=b", "mysql://u:***@h/db?a=b"),
            ("mysql://u:s3cr3t space@h/db", "mysql://u:***@h/db"),
            ("postgres:u:s3cr3t@h/db", "postgres:u:***@h/db"),
            ("postgres:/u:s3cr3t@h/db", "postgres:/u:***@h/db"),
            ("u:s3cr3t@h/db", "u:***@h/db"),
            ("postgres://u:s3cr3t@[::1/db", "postgres://u:***@[::1/db"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
        for unchanged in [
            "postgres://h:5432/db",
            "postgres://u@h/db?sslmode=require",
            "sqlite::memory:",
            "sqlite:///var/lib/a@b:c.db",
            "sqlite://jobs.db",
        ] {
            assert_eq!(redact(unchanged), unchanged);
        }
    }
}
