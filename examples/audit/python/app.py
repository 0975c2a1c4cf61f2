# audit: a per-tenant audit log of `map/send` traffic, in Python on the
# plugin SDK (plugins/sdk-python, `map_plugin`), built with componentize-py.
# The same extension exists in Rust and JavaScript; the behaviour is
# specified in ../README.md and held by tests/interop/audit.test.mjs.
#
# World `intercepting-extension`: exports `rpc` and `send-observer`.
#
#   on-send                 -> one commit: counters/total += 1,
#                              counters/from/<sender> += 1,
#                              records/<ts 13 digits>/<id> = the record;
#                              then event `audit.recorded`, metric `audit_records_total`
#   audit/list   {limit?, cursor?} -> {records, nextCursor}
#   audit/stats  {}                -> {total, bySender}
#   audit/forget {from}            -> {removed}
#
# componentize-py runs this module's top level once, at build time, and
# snapshots it: import everything here, and call no host import here.

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Dict, Optional

from map_plugin import Call, ErrorRange, Extension, Range, SentMessage, events, json_key, metrics
from map_plugin.store import Batch, Collection, Counter, Committed, retry

# 22099: storage failures and unexpected exceptions (the instance is kept).
ext = Extension("audit", "1.0.0", uri="urn:example:audit:1", errors=ErrorRange(22000, 22099))

COUNTERS = Counter("counters")  # total, from/<sender>
RECORDS: Collection[Dict[str, Any]] = Collection("records")  # <ts, 13 digits>/<message id> -> record
TOTAL = "total"
FROM = "from/"


@dataclass
class ListParams:
    limit: Annotated[int, Range(1, 200)] = 50
    cursor: Optional[str] = None


@dataclass
class ForgetParams:
    sender: str = json_key("from")


@ext.method("audit/list")
def audit_list(call: Call, p: ListParams) -> dict:
    page = RECORDS.page(after=p.cursor, limit=p.limit)
    return {"records": page.values(), "nextCursor": page.next}


@ext.method("audit/stats")
def audit_stats(call: Call, p: dict) -> dict:
    by_sender = {key[len(FROM):]: n for key, n in COUNTERS.scan(FROM)}
    return {"total": COUNTERS.get(TOTAL), "bySender": by_sender}


@ext.method("audit/forget")
def audit_forget(call: Call, p: ForgetParams) -> dict:
    def attempt() -> Any:
        # Read and delete in one commit, conditioned on the records read, so
        # a record written meanwhile is read on the next attempt.
        batch = Batch()
        keys = []
        for entry in RECORDS.scan():
            if entry.value.get("from") == p.sender:
                batch.expect_version(RECORDS, entry.key, entry.version).delete(RECORDS, entry.key)
                keys.append(entry.key)
        batch.delete(COUNTERS, FROM + p.sender)
        if keys:
            batch.add(COUNTERS, TOTAL, -len(keys))
        outcome = batch.commit()
        return {"removed": len(keys)} if isinstance(outcome, Committed) else outcome

    return retry(attempt)


@ext.on_send()  # every message
def record(caller: Any, m: SentMessage) -> None:
    key = f"{m.timestamp:013d}/{m.id}"
    protocol = m.meta.get("protocol")
    entry = {
        "key": key,
        "id": m.id,
        "from": m.sender,
        "to": m.to,
        "timestamp": m.timestamp,
        "payloadBytes": len(m.payload_json.encode("utf-8")),
        "protocol": protocol if isinstance(protocol, str) else None,
        "delivered": len(m.delivered),
    }
    batch = Batch().put(RECORDS, key, entry)
    batch.add(COUNTERS, TOTAL, 1)
    batch.add(COUNTERS, FROM + m.sender, 1)
    batch.apply()
    events.emit("audit.recorded", {"key": key, "id": m.id, "from": m.sender})
    metrics.count("audit_records_total")


ext.export(globals())
