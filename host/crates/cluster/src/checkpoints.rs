//! Saving the positions of this node's subscriptions to the directory, so
//! that a session resumed on another node goes on where it was. Every
//! checkpoint interval the position one interval earlier is saved, so a
//! frame still queued for a slow connection is sent again after a resume
//! elsewhere rather than skipped.

use std::time::Duration;

use super::directory::{self, Checkpoint, DirectoryPublisher};
use map_core::fabric::SubscriptionView;

/// Save one tenant's subscription positions every `every`, for as long as
/// `subscriptions` gives them (none: the tenant's fabric is gone).
pub(super) fn spawn(
    dir: DirectoryPublisher,
    tenant_token: String,
    every: Duration,
    subscriptions: impl Fn() -> Option<Vec<SubscriptionView>> + Send + 'static,
) {
    tokio::spawn(async move {
        let mut saver = Saver { dir, tenant_token, previous: Default::default(), starts: Default::default(), saved: Default::default() };
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            let Some(subscriptions) = subscriptions() else { return };
            let current = saver.positions(subscriptions);
            saver.save(&current).await;
            saver.previous = current;
        }
    });
}

type Positions = foldhash::HashMap<String, Checkpoint>;

/// One tenant's saved positions, by subscription.
struct Saver {
    dir: DirectoryPublisher,
    tenant_token: String,
    /// The positions of the previous tick.
    previous: Positions,
    /// Where each subscription began.
    starts: Positions,
    /// What the directory holds.
    saved: Positions,
}

impl Saver {
    /// The subscriptions' positions now; a new one's start is noted.
    fn positions(&mut self, subscriptions: Vec<SubscriptionView>) -> Positions {
        let current: Positions = subscriptions
            .into_iter()
            .map(|s| {
                self.starts.entry(s.id.clone()).or_insert_with(|| Checkpoint {
                    session: s.session_id.clone(),
                    filter: s.filter.clone(),
                    sequence: 0,
                    last: s.start_event_id,
                    paused: false,
                });
                (s.id, Checkpoint { session: s.session_id, filter: s.filter, sequence: s.sequence, last: s.last_event_id, paused: s.paused })
            })
            .collect();
        self.starts.retain(|id, _| current.contains_key(id));
        current
    }

    /// Save the previous tick's positions (a new subscription's start),
    /// with the pause as it is now; remove those of subscriptions gone.
    async fn save(&mut self, current: &Positions) {
        for (id, now) in current {
            let Some(mut at) = self.previous.get(id).or_else(|| self.starts.get(id)).cloned() else { continue };
            at.paused = now.paused;
            if !self.saved.get(id).is_some_and(|s| s.same_place(&at)) {
                let key = directory::key(&self.tenant_token, directory::SUBSCRIPTION, id);
                let body = serde_json::to_vec(&at).expect("checkpoints serialise");
                if self.dir.put(&key, Some(body.into())).await.is_ok() {
                    self.saved.insert(id.clone(), at);
                }
            }
        }
        let gone: Vec<String> = self.saved.keys().filter(|id| !current.contains_key(*id)).cloned().collect();
        for id in gone {
            let _ = self.dir.put(&directory::key(&self.tenant_token, directory::SUBSCRIPTION, &id), None).await;
            self.saved.remove(&id);
        }
    }
}
