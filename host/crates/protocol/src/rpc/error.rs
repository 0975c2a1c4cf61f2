use serde_json::{json, Value};

/// Error codes of JSON-RPC 2.0 and of the MAP specification.
/// Code ranges no extension may claim: JSON-RPC's, the MAP core's and its sessions'.
pub const RESERVED: [(i64, i64); 3] = [(-32768, -32000), (1000, 9999), (16000, 16999)];

pub mod codes {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;

    pub const AUTH_REQUIRED: i64 = 1000;
    pub const AUTH_FAILED: i64 = 1001;
    pub const TOKEN_EXPIRED: i64 = 1002;
    pub const PERMISSION_DENIED: i64 = 1003;

    pub const ADDRESS_NOT_FOUND: i64 = 2000;
    pub const AGENT_NOT_FOUND: i64 = 2001;
    pub const SCOPE_NOT_FOUND: i64 = 2002;
    pub const DELIVERY_FAILED: i64 = 2003;
    pub const ADDRESS_AMBIGUOUS: i64 = 2004;

    pub const AGENT_EXISTS: i64 = 3000;
    pub const STATE_INVALID: i64 = 3001;
    pub const AGENT_TERMINATED: i64 = 3003;

    pub const RESOURCE_EXHAUSTED: i64 = 4000;

    pub const FEDERATION_UNAVAILABLE: i64 = 5000;
    pub const FEDERATION_SYSTEM_NOT_FOUND: i64 = 5001;
    pub const FEDERATION_AUTH_FAILED: i64 = 5002;
    pub const FEDERATION_ROUTE_REJECTED: i64 = 5003;
    pub const FEDERATION_LOOP: i64 = 5010;
    pub const FEDERATION_MAX_HOPS: i64 = 5011;

    pub const SESSION_NOT_FOUND: i64 = 16000;
    /// Another connection holds the session.
    pub const SESSION_IN_USE: i64 = 16001;
}

/// A JSON-RPC error object. `data.category` is derived from the code so that
/// every error a client sees is classified the same way.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError { code, message: message.into(), data: None }
    }

    /// Attach `data` as given (its `category` is added on the wire).
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// Attach `data.details`.
    pub fn with_details(mut self, details: Value) -> Self {
        self.data = Some(json!({ "details": details }));
        self
    }

    pub fn parse_error(msg: impl std::fmt::Display) -> Self {
        Self::new(codes::PARSE_ERROR, format!("Parse error: {msg}"))
    }
    pub fn invalid_request(msg: impl Into<String>) -> Self {
        Self::new(codes::INVALID_REQUEST, msg)
    }
    pub fn method_not_found(method: &str) -> Self {
        Self::new(codes::METHOD_NOT_FOUND, format!("Method not found: {method}"))
    }
    pub fn invalid_params(msg: impl Into<String>) -> Self {
        Self::new(codes::INVALID_PARAMS, msg)
    }
    pub fn internal(msg: impl Into<String>) -> Self {
        Self::new(codes::INTERNAL_ERROR, msg)
    }

    /// The category the MAP specification assigns to a code range.
    pub fn category(code: i64) -> &'static str {
        match code {
            -32099..=-32000 | -32603 => "internal",
            c if c < 0 => "protocol",
            1000..=1999 => "auth",
            2000..=2999 => "routing",
            3000..=3999 => "agent",
            4000..=4999 => "resource",
            5000..=5999 => "federation",
            10000..=10999 => "mail",
            11000..=11999 => "credentials",
            12000..=12999 => "workspace",
            13000..=13999 => "trajectory",
            16000..=16999 => "session",
            _ => "extension",
        }
    }

    fn retryable(code: i64) -> bool {
        matches!(code, codes::DELIVERY_FAILED | codes::RESOURCE_EXHAUSTED | 4001 | 3002)
    }

    /// The wire form: `{code, message, data: {category, retryable?, ...}}`.
    pub fn to_json(&self) -> Value {
        let mut data = match &self.data {
            Some(Value::Object(m)) => m.clone(),
            Some(other) => {
                let mut m = serde_json::Map::new();
                m.insert("details".into(), other.clone());
                m
            }
            None => serde_json::Map::new(),
        };
        data.entry("category").or_insert_with(|| Value::from(Self::category(self.code)));
        if Self::retryable(self.code) {
            data.entry("retryable").or_insert(Value::Bool(true));
        }
        json!({ "code": self.code, "message": self.message, "data": data })
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for RpcError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_follow_code_ranges() {
        assert_eq!(RpcError::new(codes::PARSE_ERROR, "x").to_json()["data"]["category"], "protocol");
        assert_eq!(RpcError::new(codes::INTERNAL_ERROR, "x").to_json()["data"]["category"], "internal");
        assert_eq!(RpcError::new(codes::AGENT_NOT_FOUND, "x").to_json()["data"]["category"], "routing");
        assert_eq!(RpcError::new(10002, "x").to_json()["data"]["category"], "mail");
        assert_eq!(RpcError::new(codes::DELIVERY_FAILED, "x").to_json()["data"]["retryable"], true);
    }

    #[test]
    fn custom_data_keeps_category() {
        let e = RpcError::new(codes::AUTH_FAILED, "no").with_details(json!({"why": 1}));
        let j = e.to_json();
        assert_eq!(j["data"]["category"], "auth");
        assert_eq!(j["data"]["details"]["why"], 1);
    }
}
