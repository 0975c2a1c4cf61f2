//! Rollouts: a reload on one node makes every node serve the same
//! component digests. The node that reloaded announces what it now serves
//! on `<name>.rollout` (NATS core); every other node reloads pinned to
//! those digests (from its file or source, else from the components it
//! kept) and reports on `<name>.rollout.report` what it serves, or why it
//! could not (it keeps the old version). Every node hears every report, so
//! `GET /admin/rollout` on any node shows the whole cluster. A rollback is
//! a rollout to the digests the last one replaced.
//!
//! Nodes that are down miss a rollout: when they start they load what
//! their configuration names.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Weak};

use futures_util::StreamExt;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::Cluster;
use map_core::reloads::{Pins, Rollout};
use map_core::Gateway;

/// Rollouts remembered for `GET /admin/rollout/ID`, newest kept.
const KEPT: usize = 16;

#[derive(Serialize, Deserialize, Clone)]
struct Announcement {
    id: String,
    kind: String,
    from: String,
    pins: Pins,
    /// What the announcing node served before (a rollback goes back to it).
    previous: Pins,
}

#[derive(Serialize, Deserialize, Clone)]
struct Report {
    id: String,
    node: String,
    /// `done` or `failed` (then it serves what it did before).
    state: String,
    digests: Pins,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

struct Record {
    announced: Announcement,
    at: u64,
    reports: BTreeMap<String, Report>,
}

pub struct Rollouts {
    node: Arc<str>,
    subject: String,
    client: async_nats::Client,
    recent: Mutex<VecDeque<Record>>,
    /// Reports heard before their rollout's announcement (another node's may overtake it).
    early: Mutex<Vec<Report>>,
}

impl Rollouts {
    fn remember(&self, announced: Announcement) {
        let mut recent = self.recent.lock();
        if recent.iter().any(|r| r.announced.id == announced.id) {
            return;
        }
        if recent.len() == KEPT {
            recent.pop_front();
        }
        // The announcing node serves what it announced.
        let own = Report { id: announced.id.clone(), node: announced.from.clone(), state: "done".into(), digests: announced.pins.clone(), error: None };
        let mut reports = BTreeMap::from([(own.node.clone(), own)]);
        let mut early = self.early.lock();
        for r in early.extract_if(.., |r| r.id == announced.id) {
            reports.insert(r.node.clone(), r);
        }
        recent.push_back(Record { announced, at: map_protocol::ids::now_ms(), reports });
    }

    fn add_report(&self, report: Report) {
        match self.recent.lock().iter_mut().find(|r| r.announced.id == report.id) {
            Some(r) => {
                r.reports.insert(report.node.clone(), report);
            }
            None => {
                let mut early = self.early.lock();
                if early.len() == KEPT * 8 {
                    early.remove(0);
                }
                early.push(report);
            }
        }
    }

    fn publish(&self, subject: String, value: &impl Serialize) {
        let client = self.client.clone();
        let body = serde_json::to_vec(value).expect("JSON");
        tokio::spawn(async move {
            if let Err(e) = client.publish(subject, body.into()).await {
                tracing::warn!(error = %e, "a rollout message was not sent");
            }
        });
    }

}

impl Rollout for Rollouts {
    fn announce(&self, kind: &'static str, pins: Pins, previous: Pins) -> String {
        let announced = Announcement { id: map_protocol::ids::ulid(), kind: kind.into(), from: self.node.to_string(), pins, previous };
        let id = announced.id.clone();
        self.remember(announced.clone());
        self.publish(self.subject.clone(), &announced);
        id
    }

    /// `{id, kind, from, requestedAt, pins, previous, nodes: {node: {state, digests, error?}}}`, the latest or by id.
    fn view(&self, id: Option<&str>) -> Option<Value> {
        let recent = self.recent.lock();
        let r = match id {
            Some(id) => recent.iter().find(|r| r.announced.id == id),
            None => recent.back(),
        }?;
        let a = &r.announced;
        let nodes: serde_json::Map<String, Value> = r.reports.iter().map(|(n, rep)| (n.clone(), json!({"state": rep.state, "digests": rep.digests, "error": rep.error}))).collect();
        Some(json!({"id": a.id, "kind": a.kind, "from": a.from, "requestedAt": r.at, "pins": a.pins, "previous": a.previous, "nodes": nodes}))
    }

    fn previous(&self) -> Option<Pins> {
        self.recent.lock().back().map(|r| r.announced.previous.clone()).filter(|p| !p.is_empty())
    }
}

/// Listen for rollouts and reports; follow the others' rollouts.
pub(super) async fn serve(cluster: &Arc<Cluster>, gateway: &Arc<Gateway>) -> anyhow::Result<()> {
    let subject = format!("{}.rollout", cluster.name);
    let rollouts = Arc::new(Rollouts { node: cluster.node.clone(), subject: subject.clone(), client: cluster.client.clone(), recent: Mutex::new(VecDeque::new()), early: Mutex::new(Vec::new()) });
    let mut announcements = cluster.client.subscribe(subject.clone()).await?;
    let mut reports = cluster.client.subscribe(format!("{subject}.report")).await?;
    let (gw, me) = (Arc::downgrade(gateway), Arc::downgrade(&rollouts));
    tokio::spawn(async move {
        while let Some(msg) = announcements.next().await {
            let (Some(me), Ok(a)) = (me.upgrade(), serde_json::from_slice::<Announcement>(&msg.payload)) else { continue };
            if a.from != *me.node {
                me.remember(a.clone());
                tokio::spawn(follow(gw.clone(), me, a));
            }
        }
    });
    let me = Arc::downgrade(&rollouts);
    tokio::spawn(async move {
        while let Some(msg) = reports.next().await {
            let (Some(me), Ok(report)) = (me.upgrade(), serde_json::from_slice::<Report>(&msg.payload)) else { continue };
            me.add_report(report);
        }
    });
    gateway.set_rollout(rollouts);
    Ok(())
}

/// Reload pinned to another node's announcement and report how it went.
async fn follow(gw: Weak<Gateway>, me: Arc<Rollouts>, a: Announcement) {
    let Some(gw) = gw.upgrade() else { return };
    let result = gw.reload_pinned(a.pins.clone()).await;
    let digests = gw.digests().await;
    let report = match result {
        Ok(_) => Report { id: a.id.clone(), node: me.node.to_string(), state: "done".into(), digests, error: None },
        Err(e) => {
            tracing::error!(rollout = %a.id, error = %format!("{e:#}"), "could not follow a rollout; the previous plugins stay");
            Report { id: a.id.clone(), node: me.node.to_string(), state: "failed".into(), digests, error: Some(format!("{e:#}")) }
        }
    };
    me.add_report(report.clone());
    me.publish(format!("{}.report", me.subject), &report);
}
