//! JSON into and out of `google.protobuf.Struct` / `Value`, exactly. The
//! proto3 JSON mapping of pbjson leaves two gaps: a JSON `null` inside a
//! Struct decodes to a `Value` with no kind (it must be `null_value`), and
//! every number comes back as a double (`42.0` for `42`).

use pbjson_types::value::Kind;
use serde::Serialize;
use serde_json::{Number, Value};

use crate::proto;

/// Integers below this are doubles exactly (2^53); pbjson refuses larger ones.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// A submitted payload, with the nulls of its metadata as `null_value`.
pub fn payload(v: Value) -> Result<proto::Payload, serde_json::Error> {
    let mut p: proto::Payload = serde_json::from_value(v)?;
    if let Some(metadata) = &mut p.metadata {
        metadata.fields.values_mut().for_each(null_kinds);
    }
    Ok(p)
}

/// pbjson reads `null` as "no kind": nothing else leaves a value without one.
fn null_kinds(v: &mut pbjson_types::Value) {
    match &mut v.kind {
        None => v.kind = Some(Kind::NullValue(0)),
        Some(Kind::StructValue(s)) => s.fields.values_mut().for_each(null_kinds),
        Some(Kind::ListValue(l)) => l.values.iter_mut().for_each(null_kinds),
        Some(_) => {}
    }
}

/// A message as its proto3 JSON, whole numbers as integers. A number JSON
/// has no text for (NaN, infinity) is an error.
pub fn to_json<T: Serialize>(message: &T) -> Result<Value, serde_json::Error> {
    let mut v = serde_json::to_value(message)?;
    integers(&mut v);
    Ok(v)
}

fn integers(v: &mut Value) {
    match v {
        // -0.0 stays a double: as an integer it would lose its sign.
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() && f.fract() == 0.0 && f.abs() < EXACT && !(f == 0.0 && f.is_sign_negative()) => *n = Number::from(f as i64),
            _ => {}
        },
        Value::Array(a) => a.iter_mut().for_each(integers),
        Value::Object(o) => o.values_mut().for_each(integers),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_json_value_goes_through_a_struct_and_back() {
        let metadata = json!({
            "s": "x", "n": null, "t": true, "f": false, "i": 42, "neg": -7, "zero": 0, "frac": 0.1, "max": 9007199254740991_i64,
            "huge": 1.5e300, "negzero": -0.0, "list": [1, null, [null, {}], []], "obj": {"deep": {"n": null, "l": [{"a": null}]}},
        });
        let p = payload(json!({"type": "t", "metadata": metadata})).unwrap();
        let fields = &p.metadata.as_ref().unwrap().fields;
        assert_eq!(fields["n"].kind, Some(Kind::NullValue(0)));
        let Some(Kind::ListValue(list)) = &fields["list"].kind else { panic!("{:?}", fields["list"]) };
        assert_eq!(list.values[1].kind, Some(Kind::NullValue(0)));
        assert_eq!(to_json(&p).unwrap()["metadata"], metadata);
        assert_eq!(serde_json::to_string(&to_json(&p).unwrap()["metadata"]["i"]).unwrap(), "42");
    }

    #[test]
    fn numbers_json_cannot_carry_are_errors() {
        assert!(payload(json!({"metadata": {"n": 9007199254740993_i64}})).is_err());
        let nan = pbjson_types::Struct { fields: [("x".to_string(), pbjson_types::Value::from(f64::NAN))].into() };
        assert!(to_json(&proto::Payload { metadata: Some(nan), ..Default::default() }).is_err());
    }
}
