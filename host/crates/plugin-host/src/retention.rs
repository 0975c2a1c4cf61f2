//! What a node keeps of the components it loaded (`data_dir/components`,
//! one folder per digest, for rollouts and rollbacks) and pruned after each
//! load: the versions it serves, those the cluster's rollout pins or a
//! rollback would return to, and `server.keep_versions` older versions of
//! each plugin, the most recently served first. What it pulled from
//! registries (`data_dir/oci`) is pruned by `oci::prune`.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use map_config::Config;

/// In each kept folder: which plugin it is a version of, and when it last served.
const USED: &str = "used.json";

#[derive(Serialize, Deserialize)]
struct Used {
    plugin: String,
    #[serde(rename = "servedAt")]
    served_at: u64,
}

/// Where this node keeps a component it loaded, by digest.
pub fn kept_dir(config: &Config, digest: &str) -> PathBuf {
    config.server.data_dir.join("components").join(digest)
}

/// The kept folder `dir` holds a version of `plugin` that serves now.
pub fn mark_served(dir: &Path, plugin: &str) {
    let used = Used { plugin: plugin.to_string(), served_at: map_protocol::ids::now_ms() };
    let tmp = dir.join(format!("{USED}.{}.tmp", std::process::id()));
    let written = std::fs::write(&tmp, serde_json::to_vec(&used).expect("JSON")).and_then(|()| std::fs::rename(&tmp, dir.join(USED)));
    if let Err(e) = written {
        tracing::warn!(plugin, error = %e, dir = %dir.display(), "could not note when a kept component served");
    }
}

/// Remove the kept components no rollout or rollback needs beyond the
/// newest `keep_versions` of each plugin; `serving`: the digests loaded now.
pub fn prune(config: &Config, serving: impl IntoIterator<Item = String>) {
    let needed: BTreeSet<String> = serving.into_iter().chain(config.pins.values().cloned()).chain(config.keep_digests.iter().cloned()).collect();
    let root = config.server.data_dir.join("components");
    let Ok(entries) = std::fs::read_dir(&root) else { return };
    let mut by_plugin: HashMap<String, Vec<(u64, PathBuf)>> = HashMap::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // Folders being written are `<digest>.<pid>.tmp`.
        if name.contains('.') || needed.contains(&name) || !entry.path().is_dir() {
            continue;
        }
        let (plugin, at) = last_served(&entry.path());
        by_plugin.entry(plugin).or_default().push((at, entry.path()));
    }
    for versions in by_plugin.values_mut() {
        versions.sort_by_key(|v| std::cmp::Reverse(v.0));
        for (_, dir) in versions.get(config.server.keep_versions..).unwrap_or_default() {
            match std::fs::remove_dir_all(dir) {
                Ok(()) => tracing::info!(component = %dir.display(), "removed a kept component no rollout needs"),
                Err(e) => tracing::warn!(component = %dir.display(), error = %e, "could not remove a kept component"),
            }
        }
    }
}

/// The plugin a kept folder holds and when it last served (for folders
/// kept before this was noted: none, and the folder's time).
fn last_served(dir: &Path) -> (String, u64) {
    if let Some(used) = std::fs::read(dir.join(USED)).ok().and_then(|b| serde_json::from_slice::<Used>(&b).ok()) {
        return (used.plugin, used.served_at);
    }
    let modified = std::fs::metadata(dir).and_then(|m| m.modified()).ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok());
    (String::new(), modified.map_or(0, |d| d.as_millis() as u64))
}
