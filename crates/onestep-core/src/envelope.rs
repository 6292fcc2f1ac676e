//! The message a task receives.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A message body with its metadata and delivery count.
///
/// `attempts` counts *previous* attempts: it is `0` on the first delivery, `1` on the first
/// retry, and so on. Retry policies decide from it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// The payload handed to the task handler.
    pub body: Value,
    /// Metadata travelling with the body (scheduling info, correlation ids).
    #[serde(default)]
    pub meta: Map<String, Value>,
    /// How many times this message was attempted before.
    #[serde(default)]
    pub attempts: u32,
}

impl Envelope {
    /// An envelope with `body`, no metadata and zero attempts.
    pub fn new(body: impl Into<Value>) -> Self {
        Self {
            body: body.into(),
            meta: Map::new(),
            attempts: 0,
        }
    }

    /// Returns the envelope with `meta` set.
    pub fn with_meta(mut self, meta: Map<String, Value>) -> Self {
        self.meta = meta;
        self
    }

    /// Returns the envelope with `attempts` set.
    pub fn with_attempts(mut self, attempts: u32) -> Self {
        self.attempts = attempts;
        self
    }
}
