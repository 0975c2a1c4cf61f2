//! UAP decoding as a fuzz target (`fuzz/`, and the smoke pass below): what
//! an execution agent sends over gRPC (the first byte picks the message)
//! and a submitted job's payload (JSON into protobuf types). A message is
//! decoded or refused with INVALID_ARGUMENT; a decoded one encodes back to
//! itself, and a payload's metadata comes back as it was sent.

use prost::Message;
use serde_json::Value;

use crate::grpc::{registration, report};
use crate::hub::code;
use crate::model::Kind;
use crate::{proto, values};

pub fn decode(data: &[u8]) {
    let Some((kind, body)) = data.split_first() else { return };
    match kind % 5 {
        0 => match registration(body) {
            Ok(reg) => round_trip(&reg),
            Err(s) => assert_eq!(s.code, code::INVALID_ARGUMENT),
        },
        1 => {
            if let Ok(listen) = proto::ListenRequest::decode(body) {
                round_trip(&listen);
            }
        }
        2 => reported(Kind::Test, body),
        3 => reported(Kind::Translation, body),
        _ => payload(body),
    }
}

/// Encoded again, a decoded message decodes to what it was (unless it
/// holds a NaN, which is not equal to itself).
fn round_trip<M: Message + Default + PartialEq + std::fmt::Debug>(m: &M) {
    let again = M::decode(m.encode_to_vec().as_slice()).expect("an encoded message decodes");
    #[allow(clippy::eq_op)]
    if m == m {
        assert_eq!(&again, m, "a message changed through encoding");
    }
}

fn reported(kind: Kind, body: &[u8]) {
    match report(kind, body) {
        Ok(_) => match kind {
            Kind::Test => round_trip(&proto::TestResponse::decode(body).expect("decoded once")),
            Kind::Translation => round_trip(&proto::TranslationResponse::decode(body).expect("decoded once")),
        },
        Err(s) => assert_eq!(s.code, code::INVALID_ARGUMENT, "{}", s.message),
    }
}

/// JSON with every number as a double, the way a Struct holds it.
fn as_doubles(v: &Value) -> Value {
    match v {
        Value::Number(n) => n.as_f64().map_or(Value::Null, |f| serde_json::json!(f)),
        Value::Array(a) => Value::Array(a.iter().map(as_doubles).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), as_doubles(v))).collect()),
        other => other.clone(),
    }
}

fn payload(body: &[u8]) {
    let Ok(sent) = serde_json::from_slice::<Value>(body) else { return };
    let Ok(p) = values::payload(sent.clone()) else { return };
    let back = values::to_json(&p).expect("a payload from JSON has a JSON form");
    if let Some(metadata) = sent.get("metadata").filter(|m| m.is_object()) {
        assert_eq!(as_doubles(&back["metadata"]), as_doubles(metadata), "the metadata changed on its way through a Struct");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn smoke() {
        fuzz_smoke::smoke("uap_decode", super::decode, 4000);
    }
}
