//! JSON-RPC 2.0: frame decoding, response encoding, the error type with MAP
//! codes, and reading messages under a size limit.

mod codec;
mod error;
mod framing;

pub use codec::{decode_frame, encode_error, encode_notification, encode_result, encode_result_json, push_json_str, Decoded, Request};
pub use error::{codes, RpcError};
pub use framing::{read_cap, read_line_limited};
