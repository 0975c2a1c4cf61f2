//! `map/send` addresses: the fast path for `{"agent": …}` and the general
//! parser agree, and a refused address is invalid params.

use serde_json::value::RawValue;
use serde_json::Value;

use map_core::address::Address;
use map_protocol::rpc::codes;

pub fn address(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(raw) = serde_json::from_str::<&RawValue>(text) else { return };
    let parsed = Address::from_json(raw);
    if let Err(e) = &parsed {
        assert_eq!(e.code, codes::INVALID_PARAMS, "{}", e.message);
    }
    // serde_json's tree refuses numbers past f64 that raw JSON carries.
    let Ok(tree) = serde_json::from_str::<Value>(text) else { return };
    match (&parsed, Address::parse(&tree)) {
        (Ok(a), Ok(b)) => assert_eq!(a, &b, "the fast path and the parser disagree on {text}"),
        (Err(_), Err(_)) => {}
        (a, b) => panic!("the fast path and the parser disagree on {text}: {a:?} vs {b:?}"),
    }
}
