//! The AWS settings an `sqs` or `sns` connector holds (the reference's `region_name` and the
//! `options` it hands to `boto3.client`, the ones that apply here), the SDK configuration they
//! load, and how an SDK error becomes the runtime's connector error.

use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_config::timeout::TimeoutConfig;
use aws_credential_types::Credentials;
use aws_sdk_sqs::config::Region;
use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use onestep_core::{ConnectorErrorKind, ConnectorOperation, ConnectorOperationError, Error};

/// How long connecting to the endpoint may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one attempt of an operation may take: longer than the longest long poll (20 s).
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(45);

/// The longest error text kept (the reference's limit).
const MAX_MESSAGE_CHARS: usize = 500;

/// Where and as whom to reach SQS or SNS. Unset fields come from the SDK's default chains
/// (`AWS_REGION`, `AWS_ACCESS_KEY_ID`, `~/.aws/config`, web identity, ECS and EC2 roles).
#[derive(Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct AwsSettings {
    /// The region (`region_name`), e.g. `eu-west-1`.
    pub region: Option<String>,
    /// Another endpoint (`options.endpoint_url`): a local emulator, a VPC endpoint.
    pub endpoint_url: Option<String>,
    /// A static access key id (`options.aws_access_key_id`), with the secret key.
    pub access_key_id: Option<String>,
    /// The static secret access key (`options.aws_secret_access_key`).
    pub secret_access_key: Option<String>,
    /// A session token for temporary credentials (`options.aws_session_token`).
    pub session_token: Option<String>,
}

impl std::fmt::Debug for AwsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |v: &Option<String>| v.as_ref().map(|_| "***");
        f.debug_struct("AwsSettings")
            .field("region", &self.region)
            .field("endpoint_url", &self.endpoint_url)
            .field("access_key_id", &hidden(&self.access_key_id))
            .field("secret_access_key", &hidden(&self.secret_access_key))
            .field("session_token", &hidden(&self.session_token))
            .finish()
    }
}

impl AwsSettings {
    /// Settings that take everything from the SDK's default chains.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the region.
    pub fn with_region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    /// Sets another endpoint (`http://127.0.0.1:5000` for a local emulator).
    pub fn with_endpoint_url(mut self, url: impl Into<String>) -> Self {
        self.endpoint_url = Some(url.into());
        self
    }

    /// Sets static credentials.
    pub fn with_credentials(
        mut self,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        self.access_key_id = Some(access_key_id.into());
        self.secret_access_key = Some(secret_access_key.into());
        self.session_token = session_token;
        self
    }

    /// Checks the settings without I/O; errors name the field.
    pub fn validate(&self) -> onestep_core::Result<()> {
        if let Some(region) = &self.region
            && (region.is_empty()
                || !region
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-'))
        {
            return Err(Error::invalid(
                "region_name",
                format!("must be an AWS region such as eu-west-1, got {region:?}"),
            ));
        }
        if let Some(url) = &self.endpoint_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(Error::invalid(
                "options.endpoint_url",
                format!("must be an http:// or https:// URL, got {url:?}"),
            ));
        }
        match (&self.access_key_id, &self.secret_access_key) {
            (Some(_), None) => Err(Error::invalid(
                "options.aws_secret_access_key",
                "is required with aws_access_key_id",
            )),
            (None, Some(_)) => Err(Error::invalid(
                "options.aws_access_key_id",
                "is required with aws_secret_access_key",
            )),
            _ if self.session_token.is_some() && self.access_key_id.is_none() => {
                Err(Error::invalid(
                    "options.aws_session_token",
                    "needs aws_access_key_id and aws_secret_access_key",
                ))
            }
            _ => Ok(()),
        }
    }

    /// The texts to scrub from error messages.
    pub(crate) fn secrets(&self) -> Vec<String> {
        [
            &self.access_key_id,
            &self.secret_access_key,
            &self.session_token,
        ]
        .into_iter()
        .flatten()
        .filter(|s| !s.is_empty())
        .cloned()
        .collect()
    }

    /// Loads the SDK configuration: these settings over the default chains, rustls (ring) for
    /// HTTPS, a 5 s connect timeout and a 45 s limit per attempt. Errs (misconfigured) when no
    /// region is found anywhere.
    pub(crate) async fn load(
        &self,
        backend: &'static str,
        resource: &str,
    ) -> onestep_core::Result<aws_config::SdkConfig> {
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
            .build_https();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http)
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(CONNECT_TIMEOUT)
                    .operation_attempt_timeout(ATTEMPT_TIMEOUT)
                    .build(),
            );
        if let Some(region) = &self.region {
            loader = loader.region(Region::new(region.clone()));
        }
        if let Some(url) = &self.endpoint_url {
            loader = loader.endpoint_url(url);
        }
        if let (Some(id), Some(secret)) = (&self.access_key_id, &self.secret_access_key) {
            loader = loader.credentials_provider(Credentials::new(
                id,
                secret,
                self.session_token.clone(),
                None,
                "onestep",
            ));
        }
        let config = loader.load().await;
        if config.region().is_none() {
            return Err(Error::Connector(
                ConnectorOperationError::new(
                    backend,
                    ConnectorOperation::Open,
                    ConnectorErrorKind::Misconfigured,
                    resource,
                )
                .with_cause(std::io::Error::other(
                    "no AWS region: set the connector's region_name, or AWS_REGION",
                )),
            ));
        }
        Ok(config)
    }
}

/// Settings and the SDK client built from them on first use, shared by clones (what the `sqs`
/// and `sns` connectors hold).
pub(crate) struct LazyClient<C> {
    settings: AwsSettings,
    client: tokio::sync::OnceCell<C>,
}

impl<C: Clone> LazyClient<C> {
    /// Checked `settings`, no client yet.
    pub(crate) fn new(settings: AwsSettings) -> onestep_core::Result<Self> {
        settings.validate()?;
        Ok(Self {
            settings,
            client: tokio::sync::OnceCell::new(),
        })
    }

    /// A client configured elsewhere (default settings, so nothing to scrub).
    pub(crate) fn with_client(client: C) -> Self {
        Self {
            settings: AwsSettings::default(),
            client: tokio::sync::OnceCell::new_with(Some(client)),
        }
    }

    pub(crate) fn settings(&self) -> &AwsSettings {
        &self.settings
    }

    /// The client, built with `build` from the loaded configuration on first use.
    pub(crate) async fn get(
        &self,
        backend: &'static str,
        resource: &str,
        build: fn(&aws_config::SdkConfig) -> C,
    ) -> onestep_core::Result<C> {
        self.client
            .get_or_try_init(|| async { Ok(build(&self.settings.load(backend, resource).await?)) })
            .await
            .cloned()
    }
}

/// What kind of failure `err` is, as the reference classifies boto3's errors: no answer is
/// `Disconnected`; throttling codes are `Throttled`; a timeout or an internal error on AWS's
/// side is `Transient`; refused credentials, a bad signature or a missing queue are
/// `Misconfigured`; any other answer from the service is `Permanent`.
pub(crate) fn classify<E: ProvideErrorMetadata, R>(err: &SdkError<E, R>) -> ConnectorErrorKind {
    match err {
        SdkError::TimeoutError(_) => ConnectorErrorKind::Disconnected,
        SdkError::DispatchFailure(failure) if failure.is_io() || failure.is_timeout() => {
            ConnectorErrorKind::Disconnected
        }
        SdkError::DispatchFailure(failure) if failure.is_user() => {
            ConnectorErrorKind::Misconfigured
        }
        SdkError::ConstructionFailure(_) => ConnectorErrorKind::Misconfigured,
        SdkError::ServiceError(service) => classify_code(service.err().code().unwrap_or("")),
        _ => ConnectorErrorKind::Transient,
    }
}

/// The kind of a service error code (compared case-insensitively).
pub(crate) fn classify_code(code: &str) -> ConnectorErrorKind {
    match code.to_ascii_lowercase().as_str() {
        "throttling"
        | "throttlingexception"
        | "requestthrottled"
        | "toomanyrequestsexception"
        | "slowdown"
        | "requestthrottledexception"
        | "kmsthrottlingexception"
        | "aws.simplequeueservice.requestthrottled" => ConnectorErrorKind::Throttled,
        "requesttimeout"
        | "internalerror"
        | "internalfailure"
        | "serviceunavailable"
        | "aws.simplequeueservice.serviceunavailable" => ConnectorErrorKind::Transient,
        "accessdenied"
        | "accessdeniedexception"
        | "invalidclienttokenid"
        | "signaturedoesnotmatch"
        | "unrecognizedclientexception"
        | "invalidsecurity"
        | "aws.simplequeueservice.nonexistentqueue"
        | "queuedoesnotexist"
        | "notfound"
        | "authorizationerror" => ConnectorErrorKind::Misconfigured,
        _ => ConnectorErrorKind::Permanent,
    }
}

/// `err` of `operation` on `resource`, as the runtime's connector error: its text with every
/// secret replaced by `<redacted>` and cut to 500 characters, and `retry_delay` as the delay
/// before a retry.
pub(crate) fn connector_error<E, R>(
    backend: &'static str,
    operation: ConnectorOperation,
    resource: &str,
    err: &SdkError<E, R>,
    secrets: &[String],
    retry_delay: Duration,
) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
    R: std::fmt::Debug,
{
    let mut text = DisplayErrorContext(err).to_string();
    let mut secrets: Vec<&String> = secrets.iter().collect();
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for secret in secrets {
        text = text.replace(secret.as_str(), "<redacted>");
    }
    if text.chars().count() > MAX_MESSAGE_CHARS {
        text = text.chars().take(MAX_MESSAGE_CHARS).collect();
    }
    let mut error = ConnectorOperationError::new(backend, operation, classify(err), resource)
        .with_cause(std::io::Error::other(text));
    error.retry_delay = Some(retry_delay);
    Error::Connector(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_classified_as_the_reference_does() {
        assert_eq!(
            classify_code("ThrottlingException"),
            ConnectorErrorKind::Throttled
        );
        assert_eq!(
            classify_code("InternalError"),
            ConnectorErrorKind::Transient
        );
        assert_eq!(
            classify_code("AWS.SimpleQueueService.NonExistentQueue"),
            ConnectorErrorKind::Misconfigured
        );
        assert_eq!(
            classify_code("InvalidClientTokenId"),
            ConnectorErrorKind::Misconfigured
        );
        assert_eq!(
            classify_code("InvalidParameterValue"),
            ConnectorErrorKind::Permanent
        );
    }

    #[test]
    fn secrets_never_print() {
        let s = AwsSettings::new().with_credentials("AKIDEXAMPLE", "s3cretkey", Some("tok".into()));
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("s3cretkey") && !shown.contains("AKIDEXAMPLE"),
            "{shown}"
        );
        assert_eq!(s.secrets().len(), 3);
    }

    #[test]
    fn bad_settings_name_their_field() {
        let half = AwsSettings {
            access_key_id: Some("id".into()),
            ..AwsSettings::default()
        };
        let err = half.validate().expect_err("no secret");
        assert!(err.to_string().contains("aws_secret_access_key"), "{err}");
        let err = AwsSettings::new()
            .with_endpoint_url("127.0.0.1:5000")
            .validate()
            .expect_err("no scheme");
        assert!(err.to_string().contains("endpoint_url"), "{err}");
    }
}
