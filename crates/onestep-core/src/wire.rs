//! The message envelope on the wire, as the reference's `onestep.connectors.codec` writes and
//! reads it: one JSON object `{"body": …, "meta": {…}, "attempts": n}`. Every broker connector
//! (Redis Streams, RabbitMQ, SQS) carries this text, so Python and Rust producers and consumers
//! share one queue.
//!
//! Reading is as lenient as the reference's: text that is not JSON is the body itself, a JSON
//! value that is not an object (or an object without `"body"`) is the body, a `meta` that is not
//! an object is empty and an `attempts` that is not an integer is 0.

use crate::envelope::Envelope;
use crate::execution::canonical::python_dumps_ascii;
use serde_json::{Map, Value};

/// `envelope` as the reference encodes it (`json.dumps` of `{"body", "meta", "attempts"}` with
/// its defaults: non-ASCII characters escaped), byte for byte, so a digest or a size computed
/// over the message is the same whichever side sent it.
///
/// ```
/// use onestep_core::{Envelope, wire};
/// let text = wire::encode_envelope(&Envelope::new(serde_json::json!({"id": 1})));
/// assert_eq!(text, r#"{"body": {"id": 1}, "meta": {}, "attempts": 0}"#);
/// assert_eq!(wire::decode_envelope(text.as_bytes()).body["id"], 1);
/// ```
pub fn encode_envelope(envelope: &Envelope) -> String {
    let mut map = Map::new();
    map.insert("body".into(), envelope.body.clone());
    map.insert("meta".into(), Value::Object(envelope.meta.clone()));
    map.insert("attempts".into(), Value::from(envelope.attempts));
    python_dumps_ascii(&Value::Object(map))
}

/// The envelope in `raw`, read as the reference reads it.
pub fn decode_envelope(raw: &[u8]) -> Envelope {
    let text = String::from_utf8_lossy(raw);
    let parsed: Value = match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(_) => return Envelope::new(Value::String(text.into_owned())),
    };
    let Value::Object(mut map) = parsed else {
        return Envelope::new(parsed);
    };
    let Some(body) = map.remove("body") else {
        return Envelope::new(Value::Object(map));
    };
    let mut envelope = Envelope::new(body);
    if let Some(Value::Object(meta)) = map.remove("meta") {
        envelope.meta = meta;
    }
    // Python's `isinstance(x, int)` (booleans are ints there, and `True` counts as 1).
    envelope.attempts = match map.get("attempts") {
        Some(Value::Number(n)) => n
            .as_u64()
            .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX)),
        Some(Value::Bool(b)) => u32::from(*b),
        _ => 0,
    };
    envelope
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_reference_spelling_round_trips() {
        let mut envelope = Envelope::new(json!({"id": 7, "name": "é"}));
        envelope.meta.insert("trace".into(), json!("t-1"));
        envelope.attempts = 2;
        let text = encode_envelope(&envelope);
        assert_eq!(
            text,
            r#"{"body": {"id": 7, "name": "\u00e9"}, "meta": {"trace": "t-1"}, "attempts": 2}"#
        );
        let back = decode_envelope(text.as_bytes());
        assert_eq!(back.body, envelope.body);
        assert_eq!(back.meta, envelope.meta);
        assert_eq!(back.attempts, 2);
    }

    #[test]
    fn foreign_messages_are_read_as_the_reference_reads_them() {
        assert_eq!(decode_envelope(b"plain text").body, json!("plain text"));
        assert_eq!(decode_envelope(b"[1, 2]").body, json!([1, 2]));
        assert_eq!(decode_envelope(br#"{"id": 1}"#).body, json!({"id": 1}));
        let odd = decode_envelope(br#"{"body": 1, "meta": [], "attempts": "x"}"#);
        assert_eq!((odd.body, odd.meta.len(), odd.attempts), (json!(1), 0, 0));
        assert_eq!(
            decode_envelope(br#"{"body": 1, "attempts": -3}"#).attempts,
            0
        );
    }
}
