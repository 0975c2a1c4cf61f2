//! JSON-RPC 2.0: frame decoding, response encoding, and the error type with
//! MAP codes.

mod codec;
mod error;

pub use codec::{decode_frame, encode_error, encode_notification, encode_result, encode_result_json, push_json_str, Decoded, Request};
pub use error::{codes, RpcError, RESERVED};
