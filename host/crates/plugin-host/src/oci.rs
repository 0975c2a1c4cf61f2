//! Plugins as OCI artifacts: pushed and pulled with the OCI distribution
//! API (oci-client), kept by digest under `data_dir/oci`.
//!
//! An artifact is an image manifest whose config is the wasm OCI
//! convention's (`application/vnd.wasm.config.v0+json`) and whose layers
//! are the component (`application/wasm`) and, when the plugin has them,
//! its defaults and its signature (media types below). A pulled artifact
//! becomes a folder `data_dir/oci/<manifest digest>/` holding
//! `plugin.wasm`, `plugin.toml` and `plugin.wasm.sig`, so pins and
//! signatures are checked as for any file. Every blob is checked against
//! its digest before it is written. After each load, what no source of the
//! configuration names any more is removed (`prune`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use map_config::OciConfig;

pub const CONFIG: &str = "application/vnd.wasm.config.v0+json";
pub const COMPONENT: &str = "application/wasm";
pub const DEFAULTS: &str = "application/vnd.map-gateway.plugin.defaults.v1+toml";
pub const SIGNATURE: &str = "application/vnd.map-gateway.plugin.signature.v1+json";

/// The files a pulled artifact becomes, by layer media type.
const FILES: [(&str, &str); 3] = [(COMPONENT, "plugin.wasm"), (DEFAULTS, "plugin.toml"), (SIGNATURE, "plugin.wasm.sig")];

/// Tag lookups remembered between starts: `source` → manifest digest.
const TAGS: &str = "tags.json";

pub fn reference(source: &str) -> anyhow::Result<Reference> {
    let rest = source.strip_prefix("oci://").with_context(|| format!("{source:?} is not an oci:// reference"))?;
    rest.parse().with_context(|| format!("{source:?} is not a valid OCI reference (oci://HOST/REPO:TAG or @sha256:…)"))
}

fn client(config: &OciConfig) -> Client {
    // The gateway speaks TLS with ring; oci-client's rustls needs a provider installed.
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    Client::new(ClientConfig { protocol: ClientProtocol::HttpsExcept(config.insecure.clone()), ..ClientConfig::default() })
}

fn auth(config: &OciConfig, reference: &Reference) -> RegistryAuth {
    match config.auth.get(reference.registry()) {
        Some(a) if !a.token.is_empty() => RegistryAuth::Bearer(a.token.expose().clone()),
        Some(a) if !a.username.is_empty() => RegistryAuth::Basic(a.username.clone(), a.password.expose().clone()),
        _ => RegistryAuth::Anonymous,
    }
}

/// The component file of `source`, from the cache or the registry. A tag
/// already looked up is taken from the cache unless `refresh` (a reload);
/// a digest is fetched only when the cache lacks it.
pub async fn fetch(config: &OciConfig, data_dir: &Path, source: &str, refresh: bool) -> anyhow::Result<PathBuf> {
    let reference = reference(source)?;
    let root = data_dir.join("oci");
    let cached = |digest: &str| Some(root.join(hex(digest)).join("plugin.wasm")).filter(|p| p.exists());
    let tags = read_tags(&root);
    let known = reference.digest().map(str::to_string).or_else(|| tags.get(source).cloned().filter(|_| !refresh));
    if let Some(path) = known.as_deref().and_then(cached) {
        return Ok(path);
    }
    let image = client(config)
        .pull(&reference, &auth(config, &reference), FILES.iter().map(|(m, _)| *m).collect())
        .await
        .with_context(|| format!("pulling {source}"))?;
    let digest = image.digest.clone().context("the registry named no manifest digest")?;
    if reference.digest().is_some_and(|want| want != digest) {
        bail!("{source}: the registry answered manifest {digest}");
    }
    let manifest = image.manifest.as_ref().context("no image manifest")?;
    let dir = root.join(hex(&digest));
    if !dir.join("plugin.wasm").exists() {
        let tmp = root.join(format!(".{}.{}.tmp", hex(&digest), std::process::id()));
        std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        for layer in &image.layers {
            let Some((_, file)) = FILES.iter().find(|(m, _)| *m == layer.media_type) else { continue };
            let got = format!("sha256:{}", map_store::digest_hex(&layer.data));
            if !manifest.layers.iter().any(|d| d.media_type == layer.media_type && d.digest == got) {
                let _ = std::fs::remove_dir_all(&tmp);
                bail!("{source}: the {} blob's content ({got}) is not the one its manifest names: refusing it", layer.media_type);
            }
            std::fs::write(tmp.join(file), &layer.data)?;
        }
        if !tmp.join("plugin.wasm").exists() {
            let _ = std::fs::remove_dir_all(&tmp);
            bail!("{source} holds no {COMPONENT} layer: not a plugin");
        }
        std::fs::rename(&tmp, &dir).or_else(|e| if dir.exists() { Ok(()) } else { Err(e) }).with_context(|| format!("moving into {}", dir.display()))?;
    }
    if reference.digest().is_none() {
        let mut tags = tags;
        tags.insert(source.to_string(), digest.clone());
        write_tags(&root, &tags)?;
    }
    Ok(dir.join("plugin.wasm"))
}

/// Publish a component with its defaults (`NAME.toml`) and signature
/// (`NAME.wasm.sig`) when they are beside it: the pushed manifest's digest.
pub async fn push(config: &OciConfig, wasm: &Path, source: &str) -> anyhow::Result<String> {
    let reference = reference(source)?;
    let mut layers = vec![ImageLayer::new(std::fs::read(wasm).with_context(|| format!("reading {}", wasm.display()))?, COMPONENT.into(), None)];
    for (path, media) in [(wasm.with_extension("toml"), DEFAULTS), (super::signing::signature_path(wasm), SIGNATURE)] {
        if let Ok(bytes) = std::fs::read(&path) {
            layers.push(ImageLayer::new(bytes, media.into(), None));
        }
    }
    let digests: Vec<String> = layers.iter().map(|l| format!("sha256:{}", map_store::digest_hex(&l.data))).collect();
    let described = serde_json::json!({"architecture": "wasm", "os": "wasip2", "layerDigests": digests});
    let config_blob = Config::new(serde_json::to_vec(&described)?, CONFIG.into(), None);
    let client = client(config);
    let auth = auth(config, &reference);
    client.push(&reference, &layers, config_blob, &auth, None).await.with_context(|| format!("pushing to {source}"))?;
    client.fetch_manifest_digest(&reference, &auth).await.with_context(|| format!("reading back {source}"))
}

/// Remove what `data_dir/oci` holds that no `oci://` source of the
/// configuration names now (by digest, or by a tag's last lookup), and the
/// lookups of tags it no longer names. Versions a rollout or rollback may
/// need are kept by `retention` under `data_dir/components`.
pub fn prune(config: &map_config::Config) {
    let root = config.server.data_dir.join("oci");
    if !root.exists() {
        return;
    }
    let plugins = config.plugins.iter().flat_map(|m| m.values()).filter_map(|p| p.source.as_deref());
    let versions = config.tenants.iter().flat_map(|t| t.plugin_versions.values()).map(String::as_str);
    let sources: BTreeSet<&str> = plugins.chain(versions).filter(|s| s.starts_with("oci://")).collect();
    let mut tags = read_tags(&root);
    let before = tags.len();
    tags.retain(|source, _| sources.contains(source.as_str()));
    if tags.len() != before {
        if let Err(e) = write_tags(&root, &tags) {
            tracing::warn!(error = %format!("{e:#}"), "could not prune the tag cache");
        }
    }
    let by_digest = sources.iter().filter_map(|s| reference(s).ok()).filter_map(|r| r.digest().map(|d| hex(d).to_string()));
    let needed: BTreeSet<String> = by_digest.chain(tags.values().map(|d| hex(d).to_string())).collect();
    let Ok(entries) = std::fs::read_dir(&root) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || needed.contains(&name) || !entry.path().is_dir() {
            continue;
        }
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => tracing::info!(artifact = %name, "removed a pulled artifact no source names"),
            Err(e) => tracing::warn!(artifact = %name, error = %e, "could not remove a pulled artifact"),
        }
    }
}

fn hex(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

fn read_tags(root: &Path) -> BTreeMap<String, String> {
    std::fs::read(root.join(TAGS)).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
}

fn write_tags(root: &Path, tags: &BTreeMap<String, String>) -> anyhow::Result<()> {
    let tmp = root.join(format!(".{TAGS}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec_pretty(tags)?)?;
    std::fs::rename(&tmp, root.join(TAGS)).context("writing the tag cache")
}
