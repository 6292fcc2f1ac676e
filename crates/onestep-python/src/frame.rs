//! Frames on the pipe: a 4-byte big-endian length, then that many bytes of UTF-8 JSON.

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The largest frame either side accepts (a payload or result past this is refused).
pub const MAX_FRAME: usize = 256 * 1024 * 1024;

/// `message` as one frame.
pub fn encode(message: &Value) -> Vec<u8> {
    let body = message.to_string();
    let mut frame = Vec::with_capacity(body.len() + 4);
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(body.as_bytes());
    frame
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub async fn read<R: AsyncRead + Unpin>(reader: &mut R) -> std::io::Result<Option<Value>> {
    let mut head = [0u8; 4];
    match reader.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(head) as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes exceeds the {MAX_FRAME}-byte limit"),
        ));
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).await?;
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_frame_reads_back_and_a_short_stream_ends_cleanly() {
        let message = serde_json::json!({"op": "call", "id": 7, "payload": "é"});
        let mut bytes = encode(&message);
        assert_eq!(&bytes[..4], &(bytes.len() as u32 - 4).to_be_bytes());
        let mut reader = &bytes[..];
        assert_eq!(read(&mut reader).await.unwrap(), Some(message));
        assert_eq!(read(&mut reader).await.unwrap(), None);
        bytes.truncate(6);
        let mut cut = &bytes[..];
        assert!(
            read(&mut cut).await.is_err(),
            "a frame cut short is an error"
        );
    }

    #[tokio::test]
    async fn an_oversized_length_is_refused_before_allocating() {
        let head = u32::MAX.to_be_bytes();
        let mut reader = &head[..];
        let err = read(&mut reader).await.unwrap_err();
        assert!(err.to_string().contains("exceeds"), "{err}");
    }
}
