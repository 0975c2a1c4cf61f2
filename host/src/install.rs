//! `map-gateway plugin install FILE`: a built component into the plugin
//! folder a gateway without a `[plugins]` table loads from.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use map_config::Config;

use crate::scaffold::check_name;

/// The first eight bytes of a Wasm component (magic, then version 0x0d and layer 1).
const COMPONENT: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];
/// A core module's: Wasm, but not something the gateway loads.
const MODULE: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];

/// Copy `file` into `config`'s plugin folder as `NAME.wasm` (NAME: `name`, or
/// the file's stem with `_` as `-`, as cargo names a crate's output) and return
/// where it went. The copy is renamed into place, so a gateway reloading at
/// that moment sees the old file or the new one, never half of one.
pub fn install(file: &Path, name: Option<String>, config: &Config) -> anyhow::Result<PathBuf> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    match bytes.get(..8) {
        Some(head) if head == COMPONENT => {}
        Some(head) if head == MODULE => {
            bail!("{} is a core Wasm module, not a component: build for wasm32-wasip2 (or wrap it with `wasm-tools component new`)", file.display())
        }
        _ => bail!("{} is not a Wasm component", file.display()),
    }
    let name = match name {
        Some(n) => n,
        None => file.file_stem().and_then(|s| s.to_str()).unwrap_or_default().replace('_', "-"),
    };
    check_name(&name)?;
    if let Some(listed) = &config.plugins {
        if !listed.contains_key(&name) {
            bail!(
                "this configuration lists its plugins in a [plugins] table, so nothing loads from plugin_dir: add [plugins.{name}] path = {:?} instead",
                file.display().to_string()
            );
        }
    }
    let dir = &config.server.plugin_dir;
    // A relative default found from the wrong folder would make a folder no
    // gateway reads: only an existing one is taken.
    if !dir.is_dir() {
        bail!(
            "no plugin folder at {}: run this where the gateway runs (the checkout, for scripts/run.sh), or pass --plugin-dir or --config",
            std::path::absolute(dir).unwrap_or_else(|_| dir.clone()).display()
        );
    }
    let dest = dir.join(format!("{name}.wasm"));
    // Its signature and defaults (which the signature covers) go along, before the component.
    let sig = map_plugin_host::signing::signature_path(file);
    let dest_sig = map_plugin_host::signing::signature_path(&dest);
    if sig.exists() {
        place(&std::fs::read(&sig)?, &dest_sig)?;
    } else if dest_sig.exists() {
        std::fs::remove_file(&dest_sig).with_context(|| format!("removing the old {}", dest_sig.display()))?;
    }
    if let Ok(defaults) = std::fs::read(file.with_extension("toml")) {
        place(&defaults, &dest.with_extension("toml"))?;
    }
    place(&bytes, &dest)?;
    Ok(std::path::absolute(&dest).unwrap_or(dest))
}

/// The command that reloads the gateway `config` describes: its listener
/// (an unspecified address as loopback), https under TLS, and the admin
/// token's header when one is set (named, never printed).
pub fn reload_command(config: &Config) -> String {
    let listen = config.server.listen;
    let ip = match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    let scheme = if config.tls.enabled() { "https" } else { "http" };
    let token = if config.admin.token.is_empty() { "" } else { " -H \"authorization: Bearer $ADMIN_TOKEN\"" };
    format!("curl -X POST{token} '{scheme}://{}/admin/reload?wait=true'", SocketAddr::new(ip, listen.port()))
}

/// Write `bytes` to `dest` through a temporary file renamed into place.
fn place(bytes: &[u8], dest: &Path) -> anyhow::Result<()> {
    let mut tmp = dest.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, dest).with_context(|| format!("moving into {}", dest.display()))
}
