//! The audit extension (see ../README.md): every `map/send` of the tenant
//! recorded with one atomic commit, read back in pages, counted per
//! sender, forgotten per sender, and exported to a webhook.

use map_plugin_sdk::http::{self, Url};
use map_plugin_sdk::prelude::*;
use map_plugin_sdk::store::Text;
use map_plugin_sdk::{Observer, SentMessage};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

const ERRORS: ErrorRange = ErrorRange::new(22000, 22099);
const EXPORT_FAILED: i64 = ERRORS.code(22001);

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Record {
    key: String,
    id: String,
    from: String,
    to: Value,
    timestamp: u64,
    payload_bytes: usize,
    protocol: Option<String>,
    delivered: usize,
}

const RECORDS: Collection<Record> = Collection::new("records");
const COUNTERS: Counter = Counter::new("counters");
/// The same counters, read as text in a range.
const COUNTER_VALUES: Collection<String, Text> = Collection::new("counters");
const TOTAL: &str = "total";
const FROM: &str = "from/";

/// `limit` and `cursor` may be absent or `null`.
#[derive(Deserialize)]
struct List {
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    cursor: Option<String>,
}

/// `audit/list {limit?, cursor?}`: records oldest first.
fn list(call: &Call) -> Result<Reply> {
    let p: List = call.params()?;
    let limit = p.limit.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(Error::invalid_params("limit must be an integer from 1 to 200"));
    }
    let page = RECORDS.all().resume(p.cursor).page(limit)?;
    let records: Vec<Record> = page.entries.into_iter().map(|e| e.value).collect();
    Reply::json(&json!({ "records": records, "nextCursor": page.next }))
}

fn stats_value() -> Result<Value> {
    let total = COUNTERS.get(TOTAL)?;
    let mut by_sender = Map::new();
    COUNTER_VALUES.prefix(FROM).each(|e| {
        by_sender.insert(e.key[FROM.len()..].to_string(), json!(e.value.trim().parse::<i64>().unwrap_or(0)));
        Ok(true)
    })?;
    Ok(json!({ "total": total, "bySender": by_sender }))
}

/// `audit/stats {}`: the counters.
fn stats(call: &Call) -> Result<Reply> {
    let _: Map<String, Value> = call.params()?;
    Reply::json(&stats_value()?)
}

#[derive(Deserialize)]
struct Forget {
    from: String,
}

/// `audit/forget {from}`: that sender's records and counter, in one commit.
fn forget(call: &Call) -> Result<Reply> {
    let p: Forget = call.params()?;
    let mut batch = Batch::new();
    let mut removed = 0i64;
    RECORDS.all().each(|e| {
        if e.value.from == p.from {
            batch.delete(&RECORDS, e.key);
            removed += 1;
        }
        Ok(true)
    })?;
    if removed > 0 {
        batch.delete_key(COUNTERS.name(), format!("{FROM}{}", p.from));
        batch.add(&COUNTERS, TOTAL, -removed);
        batch.apply()?;
    }
    Reply::json(&json!({ "removed": removed }))
}

/// `audit/export {}`: POST the stats to the configured webhook.
fn export(call: &Call) -> Result<Reply> {
    let _: Map<String, Value> = call.params()?;
    let webhook: Option<String> = config::get("webhook");
    let Some(url) = webhook.as_deref().and_then(Url::parse) else {
        return Err(Error::new(EXPORT_FAILED, "no webhook is configured (plugin config `webhook`)"));
    };
    let body = serde_json::to_vec(&stats_value()?).expect("JSON serialises");
    match http::post_json(&url, "", None, &body) {
        Ok((status, _)) => Reply::json(&json!({ "status": status })),
        Err(why) => Err(Error::new(EXPORT_FAILED, format!("the webhook could not be reached: {why}"))),
    }
}

struct Audit;

impl Extension for Audit {
    const ERRORS: ErrorRange = ERRORS;
    const METHODS: Methods = Methods::new(&[("audit/list", list), ("audit/stats", stats), ("audit/forget", forget), ("audit/export", export)]);

    fn describe() -> Describe {
        // The same descriptor as the Python and JavaScript builds.
        Describe::new("audit", "1.0.0").uri("urn:example:audit:1")
    }
}

impl Observer for Audit {
    fn on_send(_caller: &Caller, m: SentMessage) {
        let meta: Value = serde_json::from_str(&m.meta).unwrap_or(Value::Null);
        let record = Record {
            key: format!("{:013}/{}", m.timestamp, m.id),
            id: m.id,
            from: m.from,
            to: serde_json::from_str(&m.to).unwrap_or(Value::Null),
            timestamp: m.timestamp,
            payload_bytes: m.payload.len(),
            protocol: meta.get("protocol").and_then(Value::as_str).map(String::from),
            delivered: m.delivered.len(),
        };
        let mut batch = Batch::new();
        batch.add(&COUNTERS, TOTAL, 1);
        batch.add(&COUNTERS, format!("{FROM}{}", record.from), 1);
        batch.put(&RECORDS, record.key.clone(), &record);
        if let Err(e) = batch.apply() {
            log::warn(&format!("audit: message {} not recorded: {}", record.id, e.message()));
            return;
        }
        events::emit("audit.recorded", &json!({ "key": record.key, "id": record.id, "from": record.from }));
        metrics::count("audit_records_total", &[], 1);
    }
}

map_plugin_sdk::export_intercepting_extension!(Audit);
