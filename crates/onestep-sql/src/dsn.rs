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
            return Err(format!(
                "dsn must start with a scheme such as postgres://, got {}",
                redact(raw)
            ));
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
        let url = if base == "sqlite" && driver.is_some() {
            // SQLAlchemy: sqlite:///relative.db, sqlite:////absolute.db
            match rest.strip_prefix("///") {
                Some(path) if path.starts_with('/') => format!("sqlite://{path}"),
                Some(path) => format!("sqlite:{path}"),
                None => format!("sqlite:{rest}"),
            }
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

/// Replaces the password of a URL (`user:secret@host`) and `password=` query values with `***`.
pub fn redact(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let authority_start = scheme_end + 3;
        let authority_end = out[authority_start..]
            .find(['/', '?', '#'])
            .map_or(out.len(), |i| authority_start + i);
        if let Some(at) = out[authority_start..authority_end].rfind('@') {
            let userinfo = &out[authority_start..authority_start + at];
            if let Some(colon) = userinfo.find(':') {
                let start = authority_start + colon + 1;
                let end = authority_start + at;
                out.replace_range(start..end, "***");
            }
        }
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
}
