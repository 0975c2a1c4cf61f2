//! The `map-gateway plugin …` commands of the supply-chain tests: run one,
//! make keys, sign, copy a fixture to sign or push.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::{fixture, BIN};

pub fn run(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

/// Its standard output, after checking it succeeded.
pub fn succeeded(out: &Output) -> String {
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Its standard error, after checking it failed.
pub fn failed(out: &Output) -> String {
    assert!(!out.status.success(), "expected a failure: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `plugin keygen` in `dir`: (secret key file, public key text).
pub fn keygen(dir: &Path, name: &str) -> (PathBuf, String) {
    let out = dir.join(name);
    succeeded(&run(&["plugin".as_ref(), "keygen".as_ref(), "--out".as_ref(), out.as_os_str()]));
    (out.with_extension("key"), std::fs::read_to_string(out.with_extension("pub")).unwrap().trim().to_string())
}

pub fn sign(wasm: &Path, key: &Path) {
    succeeded(&run(&["plugin".as_ref(), "sign".as_ref(), wasm.as_os_str(), "--key".as_ref(), key.as_os_str()]));
}

/// A copy of a fixture in `dir`, so the files made beside it stay there.
pub fn copy(fixture_name: &str, dir: &Path, as_name: &str) -> PathBuf {
    let to = dir.join(as_name);
    std::fs::copy(fixture(fixture_name), &to).unwrap();
    to
}

pub fn sha256_hex(path: &Path) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(std::fs::read(path).unwrap()).iter().map(|b| format!("{b:02x}")).collect()
}
