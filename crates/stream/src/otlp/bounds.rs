//! What decoding an OTLP request will take, known before it is decoded.
//!
//! A protobuf message costs a struct of a few hundred bytes however few bytes it takes on the
//! wire (an empty log record is two), and JSON's `{}` likewise; a 4 MiB request of empty
//! records would decode to hundreds of MiB. So a request is walked first, allocating nothing:
//! protobuf's wire format field by field (a length-delimited field that reads as a message is
//! counted as one, and walked in turn; at most [`MOST_DEPTH`] deep), JSON by its values. Each
//! message or value is charged [`MESSAGE_BYTES`] on top of the request's bytes, against the
//! request's decoding budget.

/// What one decoded message or JSON value is charged.
pub const MESSAGE_BYTES: usize = 256;

/// Deepest nesting walked (OTLP's own is about 8; attribute values may nest further, and
/// deeper messages are charged as the bytes they take).
const MOST_DEPTH: usize = 24;

/// The memory decoding protobuf `bytes` will take, about (at most: every length-delimited
/// field that reads as a message is charged as one); `None` when the bytes are not a
/// well-formed protobuf message.
pub fn protobuf_cost(bytes: &[u8]) -> Option<usize> {
    let messages = messages(bytes, 0)?;
    Some(
        messages
            .saturating_mul(MESSAGE_BYTES)
            .saturating_add(bytes.len()),
    )
}

/// The messages in `bytes` (itself one), if it reads as a message.
fn messages(bytes: &[u8], depth: usize) -> Option<usize> {
    let mut count = 1usize;
    let mut at = 0;
    while at < bytes.len() {
        let (key, used) = varint(&bytes[at..])?;
        at += used;
        if key >> 3 == 0 {
            return None;
        }
        match key & 7 {
            0 => at += varint(&bytes[at..])?.1,
            1 => at = at.checked_add(8).filter(|end| *end <= bytes.len())?,
            5 => at = at.checked_add(4).filter(|end| *end <= bytes.len())?,
            2 => {
                let (length, used) = varint(&bytes[at..])?;
                at += used;
                let end = at.checked_add(usize::try_from(length).ok()?)?;
                let inner = bytes.get(at..end)?;
                if depth < MOST_DEPTH
                    && let Some(nested) = messages(inner, depth + 1)
                {
                    count = count.saturating_add(nested);
                }
                at = end;
            }
            _ => return None,
        }
    }
    Some(count)
}

/// A varint at the start of `bytes` and the bytes it took.
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, byte) in bytes.iter().take(10).enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// The memory decoding JSON `bytes` will take, about: every value charged as a message.
pub fn json_cost(bytes: &[u8]) -> usize {
    crate::decode::rows::json_values(bytes)
        .saturating_mul(MESSAGE_BYTES)
        .saturating_add(bytes.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use prost::Message;

    #[test]
    fn empty_records_are_charged_as_the_structs_they_become() {
        let request = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: vec![LogRecord::default(); 10_000],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let bytes = request.encode_to_vec();
        assert!(bytes.len() < 30_000, "{}", bytes.len());
        let cost = protobuf_cost(&bytes).unwrap();
        assert!(cost >= 10_000 * MESSAGE_BYTES, "{cost}");
        assert_eq!(protobuf_cost(&[0xff, 0xff]), None, "a varint cut short");
        assert_eq!(
            protobuf_cost(&[0x0a, 0x05, 0x01]),
            None,
            "a length past the end"
        );
        assert!(json_cost(b"[{},{},{}]") > 3 * MESSAGE_BYTES);
    }
}
