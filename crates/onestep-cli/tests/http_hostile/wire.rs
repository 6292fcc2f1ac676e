//! The raw HTTP/1.1 client of the hostile tests: any bytes on the wire, one request per
//! connection, and the answer's status, `Content-Type` and JSON body.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A response: status, `Content-Type` and the body (parsed as JSON; `Null` when it is not).
#[derive(Debug)]
pub struct Answer {
    /// The status code; 0 when the server did not answer.
    pub status: u16,
    /// The `Content-Type` header.
    pub content_type: String,
    /// The body as JSON (`Null` when it is not JSON).
    pub body: Value,
    /// The body as text.
    pub text: String,
}

impl Answer {
    /// The `detail` of an error body (empty when there is none).
    pub fn detail(&self) -> &str {
        self.body["detail"].as_str().unwrap_or_default()
    }
}

/// How a raw request goes over the wire.
#[derive(Clone)]
pub enum How {
    /// All bytes, then read the answer.
    Whole,
    /// All bytes, then close the writing half (a body that breaks off).
    HalfClose,
    /// The head with `Expect: 100-continue`; the body only if the server asks for it.
    ExpectContinue(Vec<u8>),
    /// The head, then the body in chunked encoding while the answer is read.
    Chunked(Vec<u8>),
}

/// A request head and body: `Host`, `Connection: close`, the headers, and `Content-Length` when
/// there is a body.
pub fn http(method: &str, path: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> Vec<u8> {
    let mut raw = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (k, v) in headers {
        raw.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(body) = body {
        raw.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    raw.push_str("\r\n");
    let mut raw = raw.into_bytes();
    raw.extend_from_slice(body.unwrap_or_default());
    raw
}

/// A submit with `Content-Type: application/json` and the key.
pub fn submit_bytes(key: &str, body: &[u8]) -> Vec<u8> {
    http(
        "POST",
        "/v1/executions",
        &[
            ("Content-Type", "application/json"),
            ("Idempotency-Key", key),
        ],
        Some(body),
    )
}

/// A submit of `body` as JSON with the key.
pub fn submit_json(key: &str, body: &Value) -> Vec<u8> {
    submit_bytes(key, body.to_string().as_bytes())
}

/// A GET without a body.
pub fn get(path: &str) -> Vec<u8> {
    http("GET", path, &[], None)
}

/// A cancel of `id` with this body and `Content-Type`.
pub fn cancel_bytes(id: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
    http(
        "POST",
        &format!("/v1/executions/{id}/cancel"),
        &[("Content-Type", content_type)],
        Some(body),
    )
}

/// Sends `raw` the way `how` says and reads the answer (status 0 after 10 s of silence).
pub async fn exchange(addr: &str, raw: &[u8], how: &How) -> Answer {
    let talk = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut received = Vec::new();
        if let How::Chunked(body) = how {
            let (mut read, mut write) = stream.into_split();
            write.write_all(raw).await.unwrap();
            let body = body.clone();
            let writer = tokio::spawn(async move {
                for chunk in body.chunks(65_536) {
                    let framed =
                        [format!("{:x}\r\n", chunk.len()).as_bytes(), chunk, b"\r\n"].concat();
                    if write.write_all(&framed).await.is_err() {
                        return;
                    }
                }
                let _ = write.write_all(b"0\r\n\r\n").await;
            });
            let _ = read.read_to_end(&mut received).await;
            writer.abort();
            return received;
        }
        match how {
            How::Whole => stream.write_all(raw).await.unwrap(),
            How::HalfClose => {
                stream.write_all(raw).await.unwrap();
                stream.shutdown().await.unwrap();
            }
            How::Chunked(_) => unreachable!("handled above"),
            How::ExpectContinue(body) => {
                stream.write_all(raw).await.unwrap();
                let mut buf = vec![0u8; 4096];
                while !received.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = stream.read(&mut buf).await.unwrap();
                    assert!(n > 0, "closed before answering");
                    received.extend_from_slice(&buf[..n]);
                }
                if received.starts_with(b"HTTP/1.1 100") {
                    received.clear();
                    let _ = stream.write_all(body).await;
                }
            }
        }
        let mut buf = vec![0u8; 65536];
        // A server that stops reading may reset the connection after its answer.
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                break;
            }
            received.extend_from_slice(&buf[..n]);
        }
        received
    };
    match tokio::time::timeout(Duration::from_secs(10), talk).await {
        Ok(received) => parse(&received),
        Err(_) => no_answer("no answer within 10 s".into()),
    }
}

/// Status 0: the server did not answer (it hung, or dropped the connection).
fn no_answer(why: String) -> Answer {
    Answer {
        status: 0,
        content_type: String::new(),
        body: Value::Null,
        text: why,
    }
}

fn parse(raw: &[u8]) -> Answer {
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return no_answer(format!(
            "no HTTP answer: {:?}",
            String::from_utf8_lossy(raw)
        ));
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let header = |name: &str| {
        head.lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
    };
    let mut body = raw[split + 4..].to_vec();
    if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        body = dechunk(&body);
    }
    let text = String::from_utf8_lossy(&body).to_string();
    Answer {
        status,
        content_type: header("content-type").unwrap_or_default(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        text,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = data.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(std::str::from_utf8(&data[..end]).unwrap().trim(), 16).unwrap();
        data = &data[end + 2..];
        if size == 0 {
            break;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
    out
}

/// Sends `raw` whole and reads the answer.
pub async fn call(addr: &str, raw: &[u8]) -> Answer {
    exchange(addr, raw, &How::Whole).await
}
