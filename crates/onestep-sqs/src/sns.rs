//! `SnsConnector` and `SnsTopic`: an SNS topic published to (a [`Sink`]), as the reference's
//! `sns_topic`. The message is the envelope, JSON `{"body", "meta", "attempts"}`; an SQS queue
//! subscribed with raw message delivery receives exactly that, so an `sqs_queue` reads it back.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_sns::primitives::Blob;
use aws_sdk_sns::types::MessageAttributeValue;
use onestep_core::wire::encode_envelope;
use onestep_core::{ConnectorOperation, Envelope, Error, Resource, Result, Sink};

use crate::aws::{AwsSettings, LazyClient, connector_error};
use crate::options::DeduplicationId;

/// An SNS endpoint and credentials, and the SDK client built from them on first use and shared
/// by every topic over this connector. Cheap to clone.
#[derive(Clone)]
pub struct SnsConnector {
    inner: Arc<LazyClient<aws_sdk_sns::Client>>,
}

impl std::fmt::Debug for SnsConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnsConnector")
            .field("settings", self.inner.settings())
            .finish()
    }
}

impl SnsConnector {
    /// A connector with `settings` (checked here); no I/O until first use.
    pub fn new(settings: AwsSettings) -> Result<Self> {
        Ok(Self {
            inner: Arc::new(LazyClient::new(settings)?),
        })
    }

    /// A connector over a client configured elsewhere.
    pub fn from_client(client: aws_sdk_sns::Client) -> Self {
        Self {
            inner: Arc::new(LazyClient::with_client(client)),
        }
    }

    /// The client, built on first use.
    pub async fn client(&self, resource: &str) -> Result<aws_sdk_sns::Client> {
        self.inner
            .get("sns", resource, aws_sdk_sns::Client::new)
            .await
    }
}

#[async_trait]
impl Resource for SnsConnector {
    fn name(&self) -> &str {
        "sns"
    }
}

/// A message attribute sent with every message (boto3's `{"DataType", "StringValue"}` shape).
#[derive(Debug, Clone, PartialEq)]
pub struct MessageAttribute {
    /// `String`, `Number`, `Binary`, `String.Array`, or one of those with a custom suffix.
    pub data_type: String,
    /// The value (for `Binary`, its bytes).
    pub value: AttributeValue,
}

/// The value of a [`MessageAttribute`].
#[derive(Debug, Clone, PartialEq)]
pub enum AttributeValue {
    /// `StringValue`.
    String(String),
    /// `BinaryValue`.
    Binary(Vec<u8>),
}

/// An SNS topic's settings; [`SnsTopicOptions::new`] gives the reference's defaults.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SnsTopicOptions {
    /// The topic ARN.
    pub arn: String,
    /// The subject (e-mail subscriptions show it).
    pub subject: Option<String>,
    /// The message group of messages sent to a FIFO topic (required there).
    pub message_group_id: Option<String>,
    /// The deduplication id of messages sent to a FIFO topic.
    pub deduplication_id: Option<DeduplicationId>,
    /// Message attributes sent with every message, by name.
    pub message_attributes: Vec<(String, MessageAttribute)>,
    /// The back-off after a failed publish (default 5 s).
    pub retry_delay: Duration,
}

impl SnsTopicOptions {
    /// The options of topic `arn`, with the reference's defaults.
    pub fn new(arn: impl Into<String>) -> Self {
        Self {
            arn: arn.into(),
            subject: None,
            message_group_id: None,
            deduplication_id: None,
            message_attributes: Vec::new(),
            retry_delay: Duration::from_secs(5),
        }
    }

    /// Sets the subject.
    pub fn with_subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    /// Sets the message group for a FIFO topic.
    pub fn with_message_group_id(mut self, group: impl Into<String>) -> Self {
        self.message_group_id = Some(group.into());
        self
    }

    /// Sets how FIFO deduplication ids are computed.
    pub fn with_deduplication_id(mut self, id: DeduplicationId) -> Self {
        self.deduplication_id = Some(id);
        self
    }

    /// Adds a message attribute.
    pub fn with_attribute(mut self, name: impl Into<String>, attribute: MessageAttribute) -> Self {
        self.message_attributes.push((name.into(), attribute));
        self
    }

    /// Checks the options; errors name the field.
    pub fn validate(&self) -> Result<()> {
        if !self.arn.starts_with("arn:") {
            return Err(Error::invalid(
                "arn",
                format!("must be a topic ARN (arn:aws:sns:…), got {:?}", self.arn),
            ));
        }
        for (name, attribute) in &self.message_attributes {
            let base = attribute.data_type.split('.').next().unwrap_or("");
            if !matches!(base, "String" | "Number" | "Binary") {
                return Err(Error::invalid(
                    format!("message_attributes.{name}.DataType"),
                    format!(
                        "must be String, Number, Binary or String.Array (optionally with a \
                         .suffix), got {:?}",
                        attribute.data_type
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// An SNS topic as a sink.
#[derive(Clone, Debug)]
pub struct SnsTopic {
    connector: SnsConnector,
    options: Arc<SnsTopicOptions>,
}

impl SnsTopic {
    /// Topic `options.arn` over `connector` (named by its ARN); no I/O until it opens.
    pub fn new(connector: SnsConnector, options: SnsTopicOptions) -> Result<Self> {
        options.validate()?;
        Ok(Self {
            connector,
            options: Arc::new(options),
        })
    }

    /// The options in use.
    pub fn options(&self) -> &SnsTopicOptions {
        &self.options
    }
}

#[async_trait]
impl Resource for SnsTopic {
    fn name(&self) -> &str {
        &self.options.arn
    }

    async fn open(&self) -> Result<()> {
        self.connector.client(&self.options.arn).await.map(drop)
    }
}

#[async_trait]
impl Sink for SnsTopic {
    /// Publishes the envelope; to a FIFO topic with the message group (required) and the
    /// deduplication id.
    async fn send(&self, envelope: Envelope) -> Result<()> {
        let o = &self.options;
        let client = self.connector.client(&o.arn).await?;
        let mut request = client
            .publish()
            .topic_arn(&o.arn)
            .message(encode_envelope(&envelope))
            .set_subject(o.subject.clone());
        for (name, attribute) in &o.message_attributes {
            let value = MessageAttributeValue::builder().data_type(&attribute.data_type);
            let value = match &attribute.value {
                AttributeValue::String(s) => value.string_value(s),
                AttributeValue::Binary(b) => value.binary_value(Blob::new(b.clone())),
            };
            let value = value
                .build()
                .map_err(|e| Error::invalid(format!("message_attributes.{name}"), e.to_string()))?;
            request = request.message_attributes(name, value);
        }
        if o.arn.ends_with(".fifo") {
            let Some(group) = &o.message_group_id else {
                return Err(Error::invalid(
                    "message_group_id",
                    format!("FIFO SNS topics require message_group_id ({})", o.arn),
                ));
            };
            request = request.message_group_id(group);
            if let Some(id) = &o.deduplication_id {
                request = request.message_deduplication_id(id.of(&envelope));
            }
        }
        request.send().await.map(drop).map_err(|e| {
            connector_error(
                "sns",
                ConnectorOperation::Send,
                &o.arn,
                &e,
                &self.connector.inner.settings().secrets(),
                o.retry_delay,
            )
        })
    }
}
