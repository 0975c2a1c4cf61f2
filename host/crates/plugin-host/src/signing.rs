//! Plugin signatures: Ed25519 keys (ed25519-dalek), a signature file beside
//! each component (`NAME.wasm.sig`), and the check a deployment that names
//! signers makes before it compiles anything.
//!
//! What is signed is a short text naming the component's SHA-256 and that
//! of its defaults (`NAME.toml` beside it, or none), so neither can be
//! swapped without the signature failing. Keys are written
//! `ed25519:<base64 of the 32-byte public key>`; secret keys
//! `ed25519-secret:<base64 of the 32-byte seed>`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};

const PUBLIC: &str = "ed25519:";
const SECRET: &str = "ed25519-secret:";

/// A trusted public key, with the short id signature files name it by.
#[derive(Clone, Debug)]
pub struct PublicKey {
    pub id: String,
    key: VerifyingKey,
}

impl PublicKey {
    pub fn parse(text: &str) -> anyhow::Result<PublicKey> {
        let b64 = text.trim().strip_prefix(PUBLIC).with_context(|| format!("a plugin signer must be written {PUBLIC}<base64>, got {:?}", short(text)))?;
        let bytes: [u8; 32] = B64.decode(b64).ok().and_then(|b| b.try_into().ok()).context("a plugin signer's key must be 32 bytes of base64")?;
        let key = VerifyingKey::from_bytes(&bytes).context("not an Ed25519 public key")?;
        Ok(PublicKey { id: key_id(&key), key })
    }

    pub fn text(&self) -> String {
        format!("{PUBLIC}{}", B64.encode(self.key.as_bytes()))
    }
}

fn short(text: &str) -> String {
    text.chars().take(24).collect()
}

/// The first 16 hex digits of the key's SHA-256.
fn key_id(key: &VerifyingKey) -> String {
    map_store::digest_hex(key.as_bytes())[..16].to_string()
}

/// The signature file of a component.
pub fn signature_path(wasm: &Path) -> PathBuf {
    let mut name = wasm.as_os_str().to_owned();
    name.push(".sig");
    PathBuf::from(name)
}

/// What a signature file holds.
#[derive(Serialize, Deserialize)]
struct SignatureFile {
    version: u32,
    key: String,
    component: String,
    defaults: Option<String>,
    signature: String,
}

/// The text that is signed.
fn statement(component: &str, defaults: Option<&str>) -> String {
    format!("map-gateway plugin signature v1\ncomponent sha256:{component}\ndefaults {}\n", defaults.map_or("none".to_string(), |d| format!("sha256:{d}")))
}

/// The SHA-256 of the component's defaults (`NAME.toml` beside it), if it has them.
fn defaults_digest(wasm: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read(wasm.with_extension("toml")) {
        Ok(bytes) => Ok(Some(map_store::digest_hex(&bytes))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).context("reading the plugin's defaults"),
    }
}

/// A new key pair: (secret key text, public key).
pub fn generate() -> anyhow::Result<(String, PublicKey)> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let secret = SigningKey::from_bytes(&seed);
    let public = secret.verifying_key();
    Ok((format!("{SECRET}{}", B64.encode(seed)), PublicKey { id: key_id(&public), key: public }))
}

/// Write a new key pair as `OUT.key` (owner-only) and `OUT.pub`: their paths.
pub fn keygen(out: &Path) -> anyhow::Result<(PathBuf, PathBuf)> {
    let (secret, public) = generate()?;
    let (secret_path, public_path) = (out.with_extension("key"), out.with_extension("pub"));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&secret_path).with_context(|| format!("creating {} (an existing key is never overwritten)", secret_path.display()))?;
    std::io::Write::write_all(&mut file, format!("{secret}\n").as_bytes())?;
    std::fs::write(&public_path, format!("{}\n", public.text())).with_context(|| format!("writing {}", public_path.display()))?;
    Ok((secret_path, public_path))
}

fn secret_key(text: &str) -> anyhow::Result<SigningKey> {
    let b64 = text.trim().strip_prefix(SECRET).context("not a plugin secret key (ed25519-secret:…)")?;
    let seed: [u8; 32] = B64.decode(b64).ok().and_then(|b| b.try_into().ok()).context("a secret key must be 32 bytes of base64")?;
    Ok(SigningKey::from_bytes(&seed))
}

/// Sign a component (and its defaults) with a secret key: writes `FILE.sig`, returns its path.
pub fn sign(wasm: &Path, secret: &str) -> anyhow::Result<PathBuf> {
    let key = secret_key(secret)?;
    let component = map_store::digest_hex(&std::fs::read(wasm).with_context(|| format!("reading {}", wasm.display()))?);
    let defaults = defaults_digest(wasm)?;
    let signature = key.sign(statement(&component, defaults.as_deref()).as_bytes());
    let file = SignatureFile { version: 1, key: key_id(&key.verifying_key()), component, defaults, signature: B64.encode(signature.to_bytes()) };
    let out = signature_path(wasm);
    std::fs::write(&out, serde_json::to_vec_pretty(&file)?).with_context(|| format!("writing {}", out.display()))?;
    Ok(out)
}

/// Sign each component of `paths` (a folder: every `*.wasm` in it, such as
/// the standard plugins' `plugins/dist`): the signature files written.
pub fn sign_all(paths: &[PathBuf], secret: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut components = Vec::new();
    for path in paths {
        if !path.is_dir() {
            components.push(path.clone());
            continue;
        }
        let entries = std::fs::read_dir(path).with_context(|| format!("reading {}", path.display()))?;
        let mut found: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "wasm")).collect();
        if found.is_empty() {
            bail!("{} holds no component (*.wasm)", path.display());
        }
        found.sort();
        components.append(&mut found);
    }
    components.iter().map(|wasm| sign(wasm, secret)).collect()
}

/// Check a component whose bytes have `digest` against trusted keys: the
/// id of the key that signed it, or why it may not load. Errors name it
/// `shown`: its file, or the `oci://` reference it was pulled from (not
/// the cache it was pulled into).
pub fn verify(wasm: &Path, shown: &str, digest: &str, trusted: &[PublicKey]) -> anyhow::Result<String> {
    let pulled = shown.starts_with("oci://");
    let sig_path = signature_path(wasm);
    let text = match std::fs::read(&sig_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && pulled => {
            bail!("{shown} is not signed: the artifact has no signature (sign the component before `plugin push`)")
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let folder = wasm.parent().map_or(".".into(), |d| d.display().to_string());
            bail!("{shown} is not signed: {} is missing (`map-gateway plugin sign {folder} --key KEY` signs every component there)", sig_path.display())
        }
        Err(e) => return Err(e).with_context(|| format!("reading the signature of {shown}")),
    };
    let file: SignatureFile = serde_json::from_slice(&text).with_context(|| format!("the signature of {shown} is not a signature file"))?;
    if file.version != 1 {
        bail!("{shown}: signature version {} is not known", file.version);
    }
    if !file.component.eq_ignore_ascii_case(digest) {
        bail!("{shown} was signed as SHA-256 {}, but the component is {digest}", file.component);
    }
    let defaults = defaults_digest(wasm)?;
    if file.defaults != defaults {
        let which = if pulled { "the artifact's defaults".to_string() } else { wasm.with_extension("toml").display().to_string() };
        bail!("{shown}: its defaults ({which}) are not the ones that were signed");
    }
    let Some(key) = trusted.iter().find(|k| k.id == file.key) else {
        bail!("{shown} is signed by key {}, which is not a trusted signer here", file.key);
    };
    let bytes: [u8; 64] = B64.decode(&file.signature).ok().and_then(|b| b.try_into().ok()).context("the signature must be 64 bytes of base64")?;
    key.key
        .verify(statement(digest, defaults.as_deref()).as_bytes(), &Signature::from_bytes(&bytes))
        .map_err(|_| anyhow::anyhow!("{shown}: the signature does not match (key {})", key.id))?;
    Ok(key.id.clone())
}

/// Whether a configuration lets a component load: where the gateway
/// (`server.plugin_signers`) or a tenant among `users`, those that bind
/// this component, (`plugin_signers`) names signers, it must be signed by one of each.
/// The id of the key that signed it, when signatures were checked. `shown`
/// names the component in errors (see `verify`).
pub fn admit(config: &map_config::Config, name: &str, wasm: &Path, shown: &str, digest: &str, users: &[&str]) -> anyhow::Result<Option<String>> {
    let gateway = keys(&config.server.plugin_signers).context("server.plugin_signers")?;
    let mut tenants = Vec::new();
    for t in config.tenants.iter().filter(|t| !t.plugin_signers.is_empty() && users.contains(&t.id.as_str())) {
        tenants.push((t.id.as_str(), keys(&t.plugin_signers).with_context(|| format!("tenant {}: plugin_signers", t.id))?));
    }
    if gateway.is_empty() && tenants.is_empty() {
        return Ok(None);
    }
    let all: Vec<PublicKey> = gateway.iter().chain(tenants.iter().flat_map(|(_, k)| k)).cloned().collect();
    let id = verify(wasm, shown, digest, &all).with_context(|| format!("plugin {name}"))?;
    if !gateway.is_empty() && !gateway.iter().any(|k| k.id == id) {
        bail!("plugin {name} is signed by key {id}, which is not one of server.plugin_signers");
    }
    if let Some((tenant, _)) = tenants.iter().find(|(_, keys)| !keys.iter().any(|k| k.id == id)) {
        bail!("plugin {name} is signed by key {id}, which is not one of tenant {tenant}'s plugin_signers");
    }
    Ok(Some(id))
}

/// `plugin verify`: check `wasm` against keys given inline or as .pub
/// files; the signing key's id and the component's digest.
pub fn verify_file(wasm: &Path, signers: &[String]) -> anyhow::Result<(String, String)> {
    let texts = signers
        .iter()
        .map(|s| if s.starts_with(PUBLIC) { Ok(s.clone()) } else { std::fs::read_to_string(s).with_context(|| format!("reading {s}")) })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let digest = map_store::digest_hex(&std::fs::read(wasm).with_context(|| format!("reading {}", wasm.display()))?);
    Ok((verify(wasm, &wasm.display().to_string(), &digest, &keys(&texts)?)?, digest))
}

/// Keys from configuration strings.
pub fn keys(texts: &[String]) -> anyhow::Result<Vec<PublicKey>> {
    texts.iter().map(|t| PublicKey::parse(t)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_covers_the_component_and_its_defaults() {
        let dir = std::env::temp_dir().join(format!("map-gateway-signing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let wasm = dir.join("p.wasm");
        std::fs::write(&wasm, b"component").unwrap();
        let (secret, public) = generate().unwrap();
        let (_, stranger) = generate().unwrap();
        let digest = |p: &Path| map_store::digest_hex(&std::fs::read(p).unwrap());
        sign(&wasm, &secret).unwrap();
        assert_eq!(verify(&wasm, "p.wasm", &digest(&wasm), std::slice::from_ref(&public)).unwrap(), public.id);
        assert!(verify(&wasm, "p.wasm", &digest(&wasm), &[stranger]).unwrap_err().to_string().contains("not a trusted signer"));
        std::fs::write(wasm.with_extension("toml"), "deadline_ms = 5").unwrap();
        assert!(verify(&wasm, "p.wasm", &digest(&wasm), std::slice::from_ref(&public)).unwrap_err().to_string().contains("defaults"));
        sign(&wasm, &secret).unwrap();
        std::fs::write(&wasm, b"tampered").unwrap();
        assert!(verify(&wasm, "p.wasm", &digest(&wasm), std::slice::from_ref(&public)).unwrap_err().to_string().contains("was signed as"));
        assert_eq!(PublicKey::parse(&public.text()).unwrap().id, public.id);
        assert!(PublicKey::parse("ed25519:AAAA").is_err() && secret_key(&public.text()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
