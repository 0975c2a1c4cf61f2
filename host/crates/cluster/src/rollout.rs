//! Rollouts: a reload on one node makes every node serve the same
//! component digests. The node that reloaded announces what it now serves
//! on `<name>.rollout` (NATS core); every other node reloads pinned to
//! those digests (from its file or source, else from the components it
//! kept) and reports on `<name>.rollout.report` what it serves, or why it
//! could not (it keeps the old version). Every node hears every report, so
//! `GET /admin/rollout` on any node shows the whole cluster. A rollback is
//! a rollout to the digests the last one replaced.
//!
//! The node that announces a rollout records it in PostgreSQL first
//! (`store::RolloutLog`): a node that starts loads the current rollout's
//! versions (see `app`), reports what it serves, and follows a rollout it
//! missed while it was starting.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Weak};

use futures_util::future::OptionFuture;
use futures_util::StreamExt;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::Cluster;
use map_core::reloads::{Pins, Rollout};
use map_core::Gateway;
use map_store::{RolloutLog, RolloutRecord};

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

impl Announcement {
    fn of(r: &RolloutRecord) -> Announcement {
        Announcement { id: r.id.clone(), kind: r.kind.clone(), from: r.from.clone(), pins: r.pins.clone(), previous: r.previous.clone() }
    }
}

/// The cluster's current rollout as this node starts: what `app` loaded.
pub struct Joining {
    /// Where the current rollout is kept (PostgreSQL).
    pub log: Option<RolloutLog>,
    /// The rollout this node loaded the versions of, if the cluster had one.
    pub current: Option<RolloutRecord>,
    /// Why it could not, and serves its configuration's versions instead.
    pub error: Option<String>,
}

pub struct Rollouts {
    node: Arc<str>,
    /// The cluster's name: its row in the rollout log.
    cluster: String,
    subject: String,
    client: async_nats::Client,
    log: Option<RolloutLog>,
    recent: Mutex<VecDeque<Record>>,
    /// Reports heard before their rollout's announcement (another node's may overtake it).
    early: Mutex<Vec<Report>>,
}

impl Rollouts {
    /// Keep a rollout announced at `at`: whether it is new here.
    fn remember(&self, announced: Announcement, at: u64) -> bool {
        let mut recent = self.recent.lock();
        if recent.iter().any(|r| r.announced.id == announced.id) {
            return false;
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
        recent.push_back(Record { announced, at, reports });
        true
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
        tokio::spawn(send(self.client.clone(), subject, serde_json::to_vec(value).expect("JSON")));
    }

    /// This node's report on rollout `id`, kept and told to the others.
    async fn report(&self, gw: &Gateway, id: &str, error: Option<String>) {
        let state = if error.is_some() { "failed" } else { "done" };
        let report = Report { id: id.to_string(), node: self.node.to_string(), state: state.into(), digests: gw.digests().await, error };
        self.add_report(report.clone());
        self.publish(format!("{}.report", self.subject), &report);
    }
}

async fn send(client: async_nats::Client, subject: String, body: Vec<u8>) {
    if let Err(e) = client.publish(subject, body.into()).await {
        tracing::warn!(error = %e, "a rollout message was not sent");
    }
}

impl Rollout for Rollouts {
    /// Recorded as the cluster's current rollout, then announced.
    fn announce(&self, kind: &'static str, pins: Pins, previous: Pins) -> String {
        let announced = Announcement { id: map_protocol::ids::ulid(), kind: kind.into(), from: self.node.to_string(), pins, previous };
        let (id, at) = (announced.id.clone(), map_protocol::ids::now_ms());
        self.remember(announced.clone(), at);
        let record = RolloutRecord {
            id: id.clone(),
            kind: announced.kind.clone(),
            from: announced.from.clone(),
            pins: announced.pins.clone(),
            previous: announced.previous.clone(),
            at,
        };
        let (log, cluster, client, subject) = (self.log.clone(), self.cluster.clone(), self.client.clone(), self.subject.clone());
        tokio::spawn(async move {
            if let Some(Err(e)) = OptionFuture::from(log.as_ref().map(|l| l.record(&cluster, &record))).await {
                tracing::error!(rollout = %record.id, error = %e, "the rollout was not recorded: a node that starts now loads its own configuration's versions");
            }
            send(client, subject, serde_json::to_vec(&announced).expect("JSON")).await;
        });
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
        let nodes: serde_json::Map<String, Value> =
            r.reports.iter().map(|(n, rep)| (n.clone(), json!({"state": rep.state, "digests": rep.digests, "error": rep.error}))).collect();
        Some(json!({"id": a.id, "kind": a.kind, "from": a.from, "requestedAt": r.at, "pins": a.pins, "previous": a.previous, "nodes": nodes}))
    }

    fn previous(&self) -> Option<Pins> {
        self.recent.lock().back().map(|r| r.announced.previous.clone()).filter(|p| !p.is_empty())
    }
}

/// Listen for rollouts and reports; follow the others' rollouts. Report
/// on the current rollout this node started on, and follow one announced
/// while it was starting.
pub(super) async fn serve(cluster: &Arc<Cluster>, gateway: &Arc<Gateway>, joining: Joining) -> anyhow::Result<()> {
    let subject = format!("{}.rollout", cluster.name);
    let rollouts = Arc::new(Rollouts {
        node: cluster.node.clone(),
        cluster: cluster.name.clone(),
        subject: subject.clone(),
        client: cluster.client.clone(),
        log: joining.log.clone(),
        recent: Mutex::new(VecDeque::new()),
        early: Mutex::new(Vec::new()),
    });
    let mut announcements = cluster.client.subscribe(subject.clone()).await?;
    let mut reports = cluster.client.subscribe(format!("{subject}.report")).await?;
    let (gw, me) = (Arc::downgrade(gateway), Arc::downgrade(&rollouts));
    tokio::spawn(async move {
        while let Some(msg) = announcements.next().await {
            let (Some(me), Ok(a)) = (me.upgrade(), serde_json::from_slice::<Announcement>(&msg.payload)) else { continue };
            if a.from != *me.node && me.remember(a.clone(), map_protocol::ids::now_ms()) {
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
    gateway.set_rollout(rollouts.clone());
    if let Some(current) = &joining.current {
        rollouts.remember(Announcement::of(current), current.at);
        rollouts.report(gateway, &current.id, joining.error).await;
    }
    // Announced between reading the log and listening: followed now.
    let missed = match OptionFuture::from(joining.log.as_ref().map(|l| l.current(&cluster.name))).await {
        Some(Ok(latest)) => latest.filter(|l| l.from != *rollouts.node),
        Some(Err(e)) => {
            tracing::warn!(error = %e, "could not read the cluster's current rollout again");
            None
        }
        None => None,
    };
    if let Some(latest) = missed {
        if rollouts.remember(Announcement::of(&latest), latest.at) {
            tokio::spawn(follow(Arc::downgrade(gateway), rollouts, Announcement::of(&latest)));
        }
    }
    Ok(())
}

/// Reload pinned to another node's announcement and report how it went.
async fn follow(gw: Weak<Gateway>, me: Arc<Rollouts>, a: Announcement) {
    let Some(gw) = gw.upgrade() else { return };
    let result = gw.reload_pinned(a.pins.clone(), a.previous.clone()).await;
    let error = result.err().map(|e| format!("{e:#}"));
    if let Some(e) = &error {
        tracing::error!(rollout = %a.id, error = %e, "could not follow a rollout; the previous plugins stay");
    }
    me.report(&gw, &a.id, error).await;
}
