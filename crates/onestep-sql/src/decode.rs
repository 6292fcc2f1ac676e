//! Decoding stored text into the core's types, as driver errors.

use onestep_core::execution::{AttemptStatus, ExecutionStatus};
use uuid::Uuid;

/// A stored status.
pub(crate) fn status(text: String) -> Result<ExecutionStatus, sqlx::Error> {
    text.parse()
        .map_err(|_| sqlx::Error::Decode(format!("unknown execution status {text:?}").into()))
}

/// A stored attempt status.
pub(crate) fn attempt_status(text: String) -> Result<AttemptStatus, sqlx::Error> {
    text.parse()
        .map_err(|_| sqlx::Error::Decode(format!("unknown attempt status {text:?}").into()))
}

/// A stored id: 32 hex digits, or the hyphenated form (MariaDB's UUID type).
#[cfg_attr(not(any(feature = "mysql", feature = "sqlite")), allow(dead_code))]
pub(crate) fn id(text: String) -> Result<Uuid, sqlx::Error> {
    Uuid::parse_str(text.trim())
        .map_err(|_| sqlx::Error::Decode(format!("invalid stored id {text:?}").into()))
}
