//! `RabbitMqConnector`: one broker and the connection the queues over it share.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use lapin::protocol::{AMQPErrorKind, AMQPHardError, AMQPSoftError};
use lapin::uri::{AMQPScheme, AMQPUri};
use lapin::{Connection, ConnectionProperties, ErrorKind};
use onestep_core::{
    ConnectorErrorKind, ConnectorOperation, ConnectorOperationError, Error, Resource, Result,
};

/// Connection settings beyond the URL (the reference's `options`, the ones that apply here).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct RabbitMqOptions {
    /// The heartbeat interval to ask for, in seconds (default: the broker's, 60 s).
    pub heartbeat: Option<u16>,
    /// How long connecting may take (default 10 s).
    pub timeout: Option<Duration>,
    /// The name the broker's management UI shows for the connection.
    pub connection_name: Option<String>,
}

impl RabbitMqOptions {
    /// Sets the heartbeat interval in seconds.
    pub fn with_heartbeat(mut self, seconds: u16) -> Self {
        self.heartbeat = Some(seconds);
        self
    }

    /// Sets the connect timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the connection name.
    pub fn with_connection_name(mut self, name: impl Into<String>) -> Self {
        self.connection_name = Some(name.into());
        self
    }
}

/// A RabbitMQ broker: its URL and one connection, opened on first use, shared by every queue
/// over this connector (each queue opens two channels on it), and opened again after it
/// dropped. Cheap to clone.
#[derive(Clone)]
pub struct RabbitMqConnector {
    inner: Arc<Inner>,
}

struct Inner {
    uri: AMQPUri,
    redacted: String,
    password: String,
    options: RabbitMqOptions,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
}

impl std::fmt::Debug for RabbitMqConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitMqConnector")
            .field("url", &self.inner.redacted)
            .finish()
    }
}

/// `url` with its password replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{path}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

impl RabbitMqConnector {
    /// A connector for `url` (`amqp://[user:password@]host[:port][/vhost]`, the vhost
    /// percent-encoded: `%2f` is `/`; or `amqps://` with the `tls` feature); no I/O until
    /// first use.
    pub fn new(url: &str) -> Result<Self> {
        Self::with_options(url, RabbitMqOptions::default())
    }

    /// A connector for `url` with `options` over it.
    pub fn with_options(url: &str, options: RabbitMqOptions) -> Result<Self> {
        let redacted = redact(url);
        let mut uri = AMQPUri::from_str(url).map_err(|e| {
            Error::invalid(
                "url",
                format!("must be an amqp:// or amqps:// URL, got {redacted}: {e}"),
            )
        })?;
        if uri.scheme == AMQPScheme::AMQPS && !cfg!(feature = "tls") {
            return Err(Error::invalid(
                "url",
                format!("{redacted}: amqps:// needs onestep-rabbitmq's `tls` feature"),
            ));
        }
        if let Some(heartbeat) = options.heartbeat {
            uri.query.heartbeat = Some(heartbeat);
        }
        let timeout = options.timeout.unwrap_or(Duration::from_secs(10));
        uri.query.connection_timeout = Some(
            u64::try_from(timeout.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
        );
        let password = uri.authority.userinfo.password.clone();
        Ok(Self {
            inner: Arc::new(Inner {
                uri,
                redacted,
                password,
                options,
                connection: tokio::sync::Mutex::new(None),
            }),
        })
    }

    /// The URL with its password hidden.
    pub fn redacted_url(&self) -> &str {
        &self.inner.redacted
    }

    /// The live connection, connecting when there is none or the last one dropped.
    pub(crate) async fn connection(&self, resource: &str) -> Result<Arc<Connection>> {
        let mut slot = self.inner.connection.lock().await;
        if let Some(conn) = slot.as_ref()
            && conn.status().connected()
        {
            return Ok(conn.clone());
        }
        let mut properties = ConnectionProperties::default();
        if let Some(name) = &self.inner.options.connection_name {
            properties = properties.with_connection_name(name.as_str().into());
        }
        let conn = Connection::connect_uri(self.inner.uri.clone(), properties)
            .await
            .map_err(|e| self.error(resource, ConnectorOperation::Open, &e, None))?;
        let conn = Arc::new(conn);
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// `err` of `operation` on `resource`, as the runtime's connector error, with the password
    /// scrubbed from its text.
    pub(crate) fn error(
        &self,
        resource: &str,
        operation: ConnectorOperation,
        err: &lapin::Error,
        retry_delay: Option<Duration>,
    ) -> Error {
        let mut text = err.to_string();
        if !self.inner.password.is_empty() {
            text = text.replace(&self.inner.password, "***");
        }
        let mut error =
            ConnectorOperationError::new("rabbitmq", operation, classify(err), resource)
                .with_cause(std::io::Error::other(text));
        error.retry_delay = retry_delay;
        Error::Connector(error)
    }
}

#[async_trait::async_trait]
impl Resource for RabbitMqConnector {
    fn name(&self) -> &str {
        "rabbitmq"
    }

    /// Closes the shared connection (the broker requeues whatever is still unacked on it).
    async fn close(&self) -> Result<()> {
        let conn = self.inner.connection.lock().await.take();
        if let Some(conn) = conn
            && conn.status().connected()
            && let Err(err) = conn.close(200, "onestep: closing".into()).await
        {
            tracing::debug!(error = %err, "closing the RabbitMQ connection");
        }
        Ok(())
    }
}

/// What kind of failure `err` is, as the reference classifies AMQP errors: a dropped or closed
/// connection or channel is `Disconnected`, refused credentials or an unsupported protocol are
/// `Misconfigured`, a missing entity or a declaration that contradicts the broker's
/// (`NOT_FOUND`, `PRECONDITION_FAILED`) is `Permanent`.
pub(crate) fn classify(err: &lapin::Error) -> ConnectorErrorKind {
    match err.kind() {
        ErrorKind::IOError(_)
        | ErrorKind::InvalidChannel(_)
        | ErrorKind::InvalidChannelState(..)
        | ErrorKind::InvalidConnectionState(_)
        | ErrorKind::MissingHeartbeatError
        | ErrorKind::ParsingError(_)
        | ErrorKind::RuntimeShutdownError(_) => ConnectorErrorKind::Disconnected,
        ErrorKind::InvalidProtocolVersion(_) | ErrorKind::AuthProviderError(_) => {
            ConnectorErrorKind::Misconfigured
        }
        ErrorKind::ProtocolError(amqp) => match amqp.kind() {
            AMQPErrorKind::Soft(AMQPSoftError::ACCESSREFUSED) => ConnectorErrorKind::Misconfigured,
            AMQPErrorKind::Soft(AMQPSoftError::NOTFOUND | AMQPSoftError::PRECONDITIONFAILED) => {
                ConnectorErrorKind::Permanent
            }
            AMQPErrorKind::Hard(AMQPHardError::CONNECTIONFORCED) => {
                ConnectorErrorKind::Disconnected
            }
            AMQPErrorKind::Hard(AMQPHardError::NOTALLOWED | AMQPHardError::INVALIDPATH) => {
                ConnectorErrorKind::Misconfigured
            }
            _ => ConnectorErrorKind::Transient,
        },
        _ => ConnectorErrorKind::Transient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_print() {
        assert_eq!(
            redact("amqp://guest:s3cret@h:5672/%2f"),
            "amqp://guest:***@h:5672/%2f"
        );
        assert_eq!(redact("amqp://h:5672/%2f"), "amqp://h:5672/%2f");
        let c = RabbitMqConnector::new("amqp://u:s3cret@127.0.0.1:5672/%2f").expect("valid");
        assert!(!format!("{c:?}").contains("s3cret"));
    }

    #[test]
    fn a_bad_url_names_the_field() {
        let err = RabbitMqConnector::new("http://x").expect_err("not amqp");
        assert!(err.to_string().contains("url"), "{err}");
    }
}
