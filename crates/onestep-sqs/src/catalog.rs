//! This crate's resource types for declarative apps, with the reference's fields: the `sqs`
//! and `sns` connectors, `sqs_queue` (a source and a sink) and `sns_topic` (a sink).
//!
//! ```
//! let mut catalog = onestep_core::catalog::Catalog::core();
//! onestep_sqs::catalog::register(&mut catalog);
//! assert!(catalog.get("sqs_queue").is_some());
//! assert!(catalog.get("sns_topic").is_some());
//! ```

use std::sync::Arc;
use std::time::Duration;

use onestep_core::catalog::{
    BuildContext, BuildError, Built, Catalog, FieldDoc, Fields, ResourceType, Role, type_name,
};
use serde_json::Value;

use crate::aws::AwsSettings;
use crate::connector::SqsConnector;
use crate::options::{DeduplicationId, MAX_VISIBILITY_TIMEOUT, OnFail, SqsQueueOptions};
use crate::queue::SqsQueue;
use crate::sns::{AttributeValue, MessageAttribute, SnsConnector, SnsTopic, SnsTopicOptions};

/// Adds `sqs`, `sqs_queue`, `sns` and `sns_topic` to `catalog`.
pub fn register(catalog: &mut Catalog) {
    catalog
        .add(ConnectorType { sns: false })
        .add(ConnectorType { sns: true })
        .add(QueueType)
        .add(TopicType);
}

const CONNECTOR_FIELDS: &[FieldDoc] = &[
    FieldDoc::optional(
        "region_name",
        "string",
        Some("AWS_REGION / the profile's"),
        "the AWS region",
    ),
    FieldDoc::optional(
        "options",
        "mapping",
        None,
        "endpoint_url, aws_access_key_id, aws_secret_access_key, aws_session_token",
    ),
];

/// The `options` boto3 takes that have no meaning here, with the reason.
const UNSUPPORTED_OPTIONS: &[(&str, &str)] = &[
    (
        "region_name",
        "set region_name on the connector itself (boto3 refuses it twice too)",
    ),
    ("api_version", "the SDK speaks the one current API version"),
    ("use_ssl", "say it in endpoint_url: http:// or https://"),
    (
        "verify",
        "certificates are always verified against the platform's roots",
    ),
    ("config", "a botocore Config object has no equivalent here"),
];

/// `type: sqs` and `type: sns`.
struct ConnectorType {
    sns: bool,
}

/// `region_name` and `options`, read into settings.
fn aws_settings(f: &mut Fields<'_>) -> Option<AwsSettings> {
    let mut settings = AwsSettings::new();
    settings.region = f.opt_string("region_name");
    let mut ok = true;
    match f.value("options") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (key, value) in map {
                let field = format!("options.{key}");
                let slot = match key.as_str() {
                    "endpoint_url" => &mut settings.endpoint_url,
                    "aws_access_key_id" => &mut settings.access_key_id,
                    "aws_secret_access_key" => &mut settings.secret_access_key,
                    "aws_session_token" => &mut settings.session_token,
                    other => {
                        let why = UNSUPPORTED_OPTIONS
                            .iter()
                            .find(|(k, _)| *k == other)
                            .map_or(
                                "unsupported option; expected one of: endpoint_url, \
                                 aws_access_key_id, aws_secret_access_key, aws_session_token",
                                |(_, why)| why,
                            );
                        f.problem(&field, why.to_string());
                        ok = false;
                        continue;
                    }
                };
                match value {
                    Value::String(s) => *slot = Some(s.clone()),
                    Value::Null => {}
                    other => {
                        f.problem(
                            &field,
                            format!("expected a string, got {}", type_name(other)),
                        );
                        ok = false;
                    }
                }
            }
        }
        Some(other) => {
            f.problem(
                "options",
                format!("expected a mapping, got {}", type_name(other)),
            );
            ok = false;
        }
    }
    if let Err(onestep_core::Error::InvalidArgument { field, message }) = settings.validate() {
        f.problem(&field, message);
        ok = false;
    }
    ok.then_some(settings)
}

impl ResourceType for ConnectorType {
    type Options = AwsSettings;

    fn name(&self) -> &'static str {
        if self.sns { "sns" } else { "sqs" }
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Connector]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        CONNECTOR_FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some(if self.sns {
            "SNSConnector"
        } else {
            "SQSConnector"
        })
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<AwsSettings> {
        aws_settings(f)
    }

    fn build(
        &self,
        _name: &str,
        settings: AwsSettings,
        _ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        let to_build = |e: onestep_core::Error| BuildError::new(e.to_string());
        if self.sns {
            let connector = SnsConnector::new(settings).map_err(to_build)?;
            Ok(Built::Connector {
                kind: "sns",
                value: Arc::new(connector.clone()),
                lifecycle: Arc::new(connector),
            })
        } else {
            let connector = SqsConnector::new(settings).map_err(to_build)?;
            Ok(Built::Connector {
                kind: "sqs",
                value: Arc::new(connector.clone()),
                lifecycle: Arc::new(connector),
            })
        }
    }
}

/// `deduplication_id_factory`: a built-in factory's name. Python refs cannot run here.
fn deduplication_id(f: &mut Fields<'_>) -> Option<DeduplicationId> {
    let name = f.opt_string("deduplication_id_factory")?;
    let id = DeduplicationId::builtin(&name);
    if id.is_none() {
        f.problem(
            "deduplication_id_factory",
            format!(
                "{name:?} is not a built-in factory; the Rust runtime knows {} (the SHA-256 of \
                 the envelope), or leave it out and turn on the queue's content-based \
                 deduplication; in Rust code use SqsQueueOptions::with_deduplication_id",
                DeduplicationId::ENVELOPE_DIGEST
            ),
        );
    }
    id
}

/// An optional count of seconds `0..=max` at `key`.
fn seconds(f: &mut Fields<'_>, key: &str, max: u32) -> Option<u32> {
    let n = f.opt_integer(key, 0)?;
    match u32::try_from(n).ok().filter(|n| *n <= max) {
        Some(n) => Some(n),
        None => {
            f.problem(key, format!("must be 0..={max} seconds, got {n}"));
            None
        }
    }
}

const QUEUE_FIELDS: &[FieldDoc] = &[
    FieldDoc::required("url", "string", "the queue URL"),
    FieldDoc::required("connector", "string", "the sqs connector resource"),
    FieldDoc::optional("name", "string", None, "accepted, as the reference does"),
    FieldDoc::optional(
        "wait_time_s",
        "integer",
        Some("20"),
        "long-poll wait, 0..=20",
    ),
    FieldDoc::optional(
        "visibility_timeout",
        "integer",
        Some("the queue's"),
        "seconds a received message stays hidden",
    ),
    FieldDoc::optional(
        "batch_size",
        "integer",
        Some("10"),
        "messages per receive, 1..=10",
    ),
    FieldDoc::optional(
        "poll_interval_s",
        "number",
        Some("0.0"),
        "pause after an empty receive",
    ),
    FieldDoc::optional(
        "message_group_id",
        "string",
        None,
        "message group for sends to a FIFO queue",
    ),
    FieldDoc::optional(
        "deduplication_id_factory",
        "string",
        None,
        "onestep_sqs:envelope_digest",
    ),
    FieldDoc::optional(
        "on_fail",
        "string",
        Some("leave"),
        "leave, release or delete",
    ),
    FieldDoc::optional(
        "delete_batch_size",
        "integer",
        Some("10"),
        "deletes per DeleteMessageBatch, 1..=10",
    ),
    FieldDoc::optional(
        "delete_flush_interval_s",
        "number",
        Some("0.5"),
        "how long acks wait to be deleted together (0: at once)",
    ),
    FieldDoc::optional(
        "heartbeat_interval_s",
        "number",
        None,
        "extend a running message's visibility this often",
    ),
    FieldDoc::optional(
        "heartbeat_visibility_timeout",
        "integer",
        Some("visibility_timeout, else 60"),
        "the visibility each extension sets",
    ),
];

/// `type: sqs_queue`.
struct QueueType;

/// A queue's connector and options, read from YAML.
struct QueueSpec {
    connector: String,
    options: SqsQueueOptions,
}

impl ResourceType for QueueType {
    type Options = QueueSpec;

    fn name(&self) -> &'static str {
        "sqs_queue"
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Source, Role::Sink]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        QUEUE_FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some("SQSQueue")
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<QueueSpec> {
        let connector = f.reference("connector", Role::Connector, Some("sqs"));
        let url = f.string("url");
        let _ = f.opt_string("name");
        let mut o = SqsQueueOptions::new(url.clone().unwrap_or_default());
        if let Some(n) = seconds(f, "wait_time_s", 20) {
            o.wait_time_s = n;
        }
        o.visibility_timeout = seconds(f, "visibility_timeout", MAX_VISIBILITY_TIMEOUT);
        if let Some(n) = f.opt_count("batch_size", 1) {
            o.batch_size = n;
        }
        if let Some(s) = f.opt_number("poll_interval_s", true) {
            o.poll_interval = Duration::from_secs_f64(s);
        }
        o.message_group_id = f.opt_string("message_group_id");
        o.deduplication_id = deduplication_id(f);
        if let Some(text) = f.opt_string("on_fail") {
            match OnFail::parse(&text) {
                Some(on_fail) => o.on_fail = on_fail,
                None => f.problem(
                    "on_fail",
                    format!("must be one of: leave, release, delete; got {text:?}"),
                ),
            }
        }
        if let Some(n) = f.opt_count("delete_batch_size", 1) {
            o.delete_batch_size = n;
        }
        if let Some(s) = f.opt_number("delete_flush_interval_s", true) {
            o.delete_flush_interval = Duration::from_secs_f64(s);
        }
        o.heartbeat_interval = f
            .opt_number("heartbeat_interval_s", false)
            .map(Duration::from_secs_f64);
        o.heartbeat_visibility_timeout =
            seconds(f, "heartbeat_visibility_timeout", MAX_VISIBILITY_TIMEOUT);
        if url.is_some()
            && let Err(onestep_core::Error::InvalidArgument { field, message }) = o.validate()
        {
            f.problem(&field, message);
        }
        Some(QueueSpec {
            connector: connector?,
            options: o,
        })
    }

    fn build(
        &self,
        _name: &str,
        spec: QueueSpec,
        ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        let connector = ctx.connector::<SqsConnector>(&spec.connector, "sqs")?;
        let queue = SqsQueue::new(SqsConnector::clone(&connector), spec.options)
            .map_err(|e| BuildError::new(e.to_string()))?;
        Ok(Built::both(Arc::new(queue)))
    }
}

const TOPIC_FIELDS: &[FieldDoc] = &[
    FieldDoc::required("arn", "string", "the topic ARN"),
    FieldDoc::required("connector", "string", "the sns connector resource"),
    FieldDoc::optional("name", "string", None, "accepted, as the reference does"),
    FieldDoc::optional("subject", "string", None, "the message subject"),
    FieldDoc::optional(
        "message_group_id",
        "string",
        None,
        "message group for a FIFO topic",
    ),
    FieldDoc::optional(
        "deduplication_id_factory",
        "string",
        None,
        "onestep_sqs:envelope_digest",
    ),
    FieldDoc::optional(
        "message_attributes",
        "mapping",
        None,
        "name: {DataType, StringValue | BinaryValue}",
    ),
    FieldDoc::optional(
        "retry_delay_s",
        "number",
        Some("5.0"),
        "back-off after a failed publish",
    ),
];

/// `type: sns_topic`.
struct TopicType;

/// A topic's connector and options, read from YAML.
struct TopicSpec {
    connector: String,
    options: SnsTopicOptions,
}

/// `message_attributes`: boto3's shape, `{name: {DataType, StringValue | BinaryValue}}`.
fn message_attributes(f: &mut Fields<'_>) -> Vec<(String, MessageAttribute)> {
    let mut out = Vec::new();
    let map = match f.value("message_attributes") {
        None | Some(Value::Null) => return out,
        Some(Value::Object(map)) => map,
        Some(other) => {
            f.problem(
                "message_attributes",
                format!("expected a mapping, got {}", type_name(other)),
            );
            return out;
        }
    };
    for (name, spec) in map {
        let field = format!("message_attributes.{name}");
        let Value::Object(spec) = spec else {
            f.problem(
                &field,
                format!(
                    "expected a mapping with DataType and StringValue, got {}",
                    type_name(spec)
                ),
            );
            continue;
        };
        if let Some(key) = spec
            .keys()
            .find(|k| !matches!(k.as_str(), "DataType" | "StringValue" | "BinaryValue"))
        {
            f.problem(
                &format!("{field}.{key}"),
                "unsupported key; expected DataType, StringValue or BinaryValue",
            );
            continue;
        }
        let Some(Value::String(data_type)) = spec.get("DataType") else {
            f.problem(&format!("{field}.DataType"), "is required (a string)");
            continue;
        };
        let value = match (spec.get("StringValue"), spec.get("BinaryValue")) {
            (Some(Value::String(s)), None) => AttributeValue::String(s.clone()),
            // boto3 sends a str given as BinaryValue as its UTF-8 bytes.
            (None, Some(Value::String(s))) => AttributeValue::Binary(s.as_bytes().to_vec()),
            _ => {
                f.problem(
                    &field,
                    "needs exactly one of StringValue or BinaryValue, a string",
                );
                continue;
            }
        };
        out.push((
            name.clone(),
            MessageAttribute {
                data_type: data_type.clone(),
                value,
            },
        ));
    }
    out
}

impl ResourceType for TopicType {
    type Options = TopicSpec;

    fn name(&self) -> &'static str {
        "sns_topic"
    }

    fn roles(&self) -> &'static [Role] {
        &[Role::Sink]
    }

    fn fields(&self) -> &'static [FieldDoc] {
        TOPIC_FIELDS
    }

    fn class_name(&self) -> Option<&'static str> {
        Some("SNSTopic")
    }

    fn read(&self, f: &mut Fields<'_>) -> Option<TopicSpec> {
        let connector = f.reference("connector", Role::Connector, Some("sns"));
        let arn = f.string("arn");
        let _ = f.opt_string("name");
        let mut o = SnsTopicOptions::new(arn.clone().unwrap_or_default());
        o.subject = f.opt_string("subject");
        o.message_group_id = f.opt_string("message_group_id");
        o.deduplication_id = deduplication_id(f);
        o.message_attributes = message_attributes(f);
        if let Some(s) = f.opt_number("retry_delay_s", true) {
            o.retry_delay = Duration::from_secs_f64(s);
        }
        if arn.is_some()
            && let Err(onestep_core::Error::InvalidArgument { field, message }) = o.validate()
        {
            f.problem(&field, message);
        }
        Some(TopicSpec {
            connector: connector?,
            options: o,
        })
    }

    fn build(
        &self,
        _name: &str,
        spec: TopicSpec,
        ctx: &mut BuildContext<'_>,
    ) -> Result<Built, BuildError> {
        let connector = ctx.connector::<SnsConnector>(&spec.connector, "sns")?;
        let topic = SnsTopic::new(SnsConnector::clone(&connector), spec.options)
            .map_err(|e| BuildError::new(e.to_string()))?;
        Ok(Built::Sink(Arc::new(topic)))
    }
}
