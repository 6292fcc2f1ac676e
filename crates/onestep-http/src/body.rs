//! Request bodies and query strings: read within a limit and a deadline, declared as JSON in
//! UTF-8, parsed strictly (a key given twice is an error, not the last one winning).

use std::collections::HashSet;
use std::fmt;
use std::pin::Pin;
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::{ApiError, quoted};

/// Reads the whole body within `timeout` (else 408): 413 as soon as it (or its declared
/// `Content-Length`) exceeds `limit`, 400 when it breaks off or its framing is broken.
pub(crate) async fn read_body(
    body: Body,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, ApiError> {
    tokio::time::timeout(timeout, read_body_untimed(body, limit))
        .await
        .unwrap_or_else(|_| {
            Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} s",
                    timeout.as_secs_f64()
                ),
            ))
        })
}

async fn read_body_untimed(mut body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body exceeds {limit} bytes"),
        )
    };
    if body.size_hint().lower() > limit as u64 {
        return Err(too_large());
    }
    let mut data = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let frame = frame.map_err(|e| {
            ApiError::bad_request(format!("the request body could not be read: {e}"))
        })?;
        if let Ok(chunk) = frame.into_data() {
            if data.len() + chunk.len() > limit {
                return Err(too_large());
            }
            data.extend_from_slice(&chunk);
        }
    }
    Ok(data.into())
}

/// Accepts a body declared as JSON (`application/json`, `application/…+json`) in UTF-8, or not
/// declared at all (as FastAPI does); another type, or another `charset` than UTF-8, is 415.
pub(crate) fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let unsupported = |why: String| ApiError::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, why);
    let text = value.to_str().unwrap_or_default();
    let mut parts = text.split(';');
    let mime = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
    let json =
        mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"));
    if !json {
        return Err(unsupported(format!(
            "Content-Type must be application/json, got {}",
            quoted(&String::from_utf8_lossy(value.as_bytes()))
        )));
    }
    for parameter in parts {
        let Some((name, given)) = parameter.split_once('=') else {
            continue;
        };
        if !name.trim().eq_ignore_ascii_case("charset") {
            continue;
        }
        let charset = given.trim().trim_matches('"');
        if !(charset.eq_ignore_ascii_case("utf-8") || charset.eq_ignore_ascii_case("utf8")) {
            return Err(unsupported(format!(
                "the body must be UTF-8 (charset=utf-8 or none), got charset {}",
                quoted(charset)
            )));
        }
    }
    Ok(())
}

/// Parses a JSON body: 400 when it is not UTF-8, not JSON, or has an object with a key given
/// twice (JSON leaves that undefined; parsers keep the first or the last value, so two services
/// could read one body differently).
pub(crate) fn parse_json(bytes: &[u8]) -> Result<Value, ApiError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|_| ApiError::bad_request("request body is not valid UTF-8"))?;
    let value: Value = serde_json::from_str(text)
        .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))?;
    let mut deserializer = serde_json::Deserializer::from_str(text);
    UniqueKeys
        .deserialize(&mut deserializer)
        .map_err(|e| ApiError::bad_request(format!("malformed JSON body: {e}")))?;
    Ok(value)
}

/// Walks a JSON document and fails on the first object that repeats a key.
struct UniqueKeys;

impl<'de> DeserializeSeed<'de> for UniqueKeys {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(UniqueKeys)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            // With `arbitrary_precision` a number arrives as a one-entry map; its value is the
            // literal, nothing to check.
            if key == "$serde_json::private::Number" {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format!(
                    "the key {} appears twice in one object",
                    quoted(&key)
                )));
            }
            map.next_value_seed(UniqueKeys)?;
        }
        Ok(())
    }
}

/// The pairs of a query string, percent-decoded: 400 when one is not UTF-8 once decoded (rather
/// than turning it into U+FFFD), 422 when a parameter is given twice.
pub(crate) fn query_pairs(query: Option<&str>) -> Result<Vec<(String, String)>, ApiError> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    for part in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (name, value) = part.split_once('=').unwrap_or((part, ""));
        let (name, value) = (form_decoded(name)?, form_decoded(value)?);
        if pairs.iter().any(|(seen, _)| *seen == name) {
            return Err(ApiError::unprocessable(format!(
                "query parameter {} is given twice",
                quoted(&name)
            )));
        }
        pairs.push((name, value));
    }
    Ok(pairs)
}

/// `application/x-www-form-urlencoded` decoding (`+` is a space), refusing invalid UTF-8.
fn form_decoded(text: &str) -> Result<String, ApiError> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        match byte {
            b'+' => bytes.push(b' '),
            b'%' => match tail
                .get(..2)
                .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok())
            {
                Some(decoded) => {
                    bytes.push(decoded);
                    rest = &tail[2..];
                    continue;
                }
                None => bytes.push(b'%'),
            },
            other => bytes.push(other),
        }
        rest = tail;
    }
    String::from_utf8(bytes).map_err(|_| {
        ApiError::bad_request("the query string is not valid UTF-8 once percent-decoded")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_given_twice_is_refused_at_any_depth() {
        assert!(parse_json(br#"{"a": 1, "b": {"c": [1, {"d": 2}]}}"#).is_ok());
        let err = parse_json(br#"{"a": 1, "b": [{"c": 1, "c": 2}]}"#).unwrap_err();
        assert!(
            err.detail.contains("the key \"c\" appears twice"),
            "{}",
            err.detail
        );
        let err = parse_json(br#"{"payload": 1, "payload": 2}"#).unwrap_err();
        assert!(
            err.detail.contains("\"payload\" appears twice"),
            "{}",
            err.detail
        );
        assert!(parse_json(br#"{"n": 100000000000000000000, "m": 1.5}"#).is_ok());
    }

    #[test]
    fn queries_are_decoded_strictly() {
        assert_eq!(
            query_pairs(Some("task_name=a+b&cursor=x%2Fy")).unwrap(),
            [
                ("task_name".into(), "a b".into()),
                ("cursor".into(), "x/y".into())
            ]
        );
        let twice = query_pairs(Some("limit=1&limit=2")).unwrap_err();
        assert_eq!(twice.detail, "query parameter \"limit\" is given twice");
        let latin1 = query_pairs(Some("task_name=%E9")).unwrap_err();
        assert_eq!(
            latin1.detail,
            "the query string is not valid UTF-8 once percent-decoded"
        );
    }

    #[test]
    fn only_utf8_json_is_accepted() {
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::CONTENT_TYPE, value.parse().unwrap());
            require_json(&headers)
        };
        assert!(with("application/json").is_ok());
        assert!(with("application/json; charset=UTF-8").is_ok());
        assert!(with("application/problem+json").is_ok());
        let err = with("application/json; charset=latin-1").unwrap_err();
        assert!(
            err.detail.contains("got charset \"latin-1\""),
            "{}",
            err.detail
        );
        assert!(with("text/plain").is_err());
    }
}
