//! `RedisConnector`: one server, shared by the streams over it.

use std::sync::Arc;
use std::time::Duration;

use onestep_core::{
    ConnectorErrorKind, ConnectorOperation, ConnectorOperationError, Error, Resource, Result,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::OnceCell;

/// Connection settings beyond the URL (the reference's `options`, the ones that apply here).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct RedisOptions {
    /// The user (overrides the URL's).
    pub username: Option<String>,
    /// The password (overrides the URL's).
    pub password: Option<String>,
    /// The database number (overrides the URL's path).
    pub db: Option<i64>,
    /// How long connecting may take (default 5 s).
    pub socket_connect_timeout: Option<Duration>,
    /// How long a command may take, beyond a blocking read's own wait (default 5 s).
    pub socket_timeout: Option<Duration>,
}

/// A Redis server: its URL and a connection for commands that do not block, opened on first
/// use and re-established after a failure. Blocking stream reads get connections of their own
/// (one per stream). Cheap to clone.
#[derive(Clone)]
pub struct RedisConnector {
    inner: Arc<Inner>,
}

struct Inner {
    client: redis::Client,
    redacted: String,
    options: RedisOptions,
    shared: OnceCell<ConnectionManager>,
}

impl std::fmt::Debug for RedisConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConnector")
            .field("url", &self.inner.redacted)
            .finish()
    }
}

/// `url` with its password replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None if !userinfo.is_empty() => format!("{scheme}://***@{host}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

impl RedisConnector {
    /// A connector for `url` (`redis://[user:password@]host[:port][/db]`, or `rediss://`);
    /// no I/O until first use.
    pub fn new(url: &str) -> Result<Self> {
        Self::with_options(url, RedisOptions::default())
    }

    /// A connector for `url` with `options` over it.
    pub fn with_options(url: &str, options: RedisOptions) -> Result<Self> {
        let redacted = redact(url);
        let mut info = redis::IntoConnectionInfo::into_connection_info(url).map_err(|e| {
            Error::invalid(
                "url",
                format!("must be a redis:// or rediss:// URL, got {redacted}: {e}"),
            )
        })?;
        let mut redis_info = info.redis_settings().clone();
        if let Some(user) = &options.username {
            redis_info = redis_info.set_username(user);
        }
        if let Some(password) = &options.password {
            redis_info = redis_info.set_password(password);
        }
        if let Some(db) = options.db {
            redis_info = redis_info.set_db(db);
        }
        info = info.set_redis_settings(redis_info);
        let client = redis::Client::open(info)
            .map_err(|e| Error::invalid("url", format!("{redacted}: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                redacted,
                options,
                shared: OnceCell::new(),
            }),
        })
    }

    /// The URL with its password hidden.
    pub fn redacted_url(&self) -> &str {
        &self.inner.redacted
    }

    fn config(&self, wait: Duration) -> ConnectionManagerConfig {
        let o = &self.inner.options;
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(
                o.socket_connect_timeout.unwrap_or(Duration::from_secs(5)),
            ))
            .set_response_timeout(Some(
                wait + o.socket_timeout.unwrap_or(Duration::from_secs(5)),
            ))
            .set_number_of_retries(1)
    }

    /// The shared connection for commands that do not block.
    pub(crate) async fn shared(
        &self,
        name: &str,
        operation: ConnectorOperation,
    ) -> Result<ConnectionManager> {
        self.inner
            .shared
            .get_or_try_init(|| async {
                ConnectionManager::new_with_config(
                    self.inner.client.clone(),
                    self.config(Duration::ZERO),
                )
                .await
            })
            .await
            .cloned()
            .map_err(|e| connector_error(name, operation, &e, None))
    }

    /// A connection of its own for commands that block up to `wait`.
    pub(crate) async fn blocking_connection(
        &self,
        name: &str,
        wait: Duration,
    ) -> Result<ConnectionManager> {
        ConnectionManager::new_with_config(self.inner.client.clone(), self.config(wait))
            .await
            .map_err(|e| connector_error(name, ConnectorOperation::Fetch, &e, None))
    }
}

#[async_trait::async_trait]
impl Resource for RedisConnector {
    fn name(&self) -> &str {
        "redis"
    }

    /// Connects and checks the server answers `PING`.
    async fn open(&self) -> Result<()> {
        let mut conn = self.shared("redis", ConnectorOperation::Open).await?;
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(|e| connector_error("redis", ConnectorOperation::Open, &e, None))?;
        Ok(())
    }
}

/// What kind of failure `err` is, as the reference classifies Redis errors.
pub(crate) fn classify(err: &redis::RedisError) -> ConnectorErrorKind {
    use redis::ErrorKind;
    if err.is_io_error() || err.is_connection_dropped() || err.is_connection_refusal() {
        return ConnectorErrorKind::Disconnected;
    }
    if err.is_timeout() {
        return ConnectorErrorKind::Disconnected;
    }
    let text = err.to_string().to_ascii_lowercase();
    match err.kind() {
        ErrorKind::AuthenticationFailed => ConnectorErrorKind::Misconfigured,
        _ if [
            "noauth",
            "wrongpass",
            "invalid password",
            "noperm",
            "permission",
        ]
        .iter()
        .any(|t| text.contains(t)) =>
        {
            ConnectorErrorKind::Misconfigured
        }
        ErrorKind::InvalidClientConfig => ConnectorErrorKind::Misconfigured,
        _ => ConnectorErrorKind::Transient,
    }
}

/// `err` of `operation` on the resource `name`, as the runtime's connector error.
pub(crate) fn connector_error(
    name: &str,
    operation: ConnectorOperation,
    err: &redis::RedisError,
    retry_delay: Option<Duration>,
) -> Error {
    let mut error = ConnectorOperationError::new("redis", operation, classify(err), name)
        .with_cause(std::io::Error::other(err.to_string()));
    error.retry_delay = retry_delay;
    Error::Connector(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_print() {
        assert_eq!(
            redact("redis://u:secret@h:6379/0"),
            "redis://u:***@h:6379/0"
        );
        assert_eq!(redact("redis://:secret@h"), "redis://:***@h");
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        let c = RedisConnector::new("redis://u:secret@127.0.0.1:6379/0").expect("valid");
        assert!(!format!("{c:?}").contains("secret"));
    }

    #[test]
    fn a_bad_url_names_the_field() {
        let err = RedisConnector::new("http://x").expect_err("not redis");
        assert!(err.to_string().contains("url"), "{err}");
    }
}
