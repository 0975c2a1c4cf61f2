//! Where a new project's plugin SDK comes from, and how each language's
//! project names it: a checkout's `plugins/` (paths: offline, and the SDK
//! as it is being changed), a folder of packages (`scripts/package-sdks.sh`:
//! the `.crate`s unpacked, the npm tarball, the wheel), or, for a binary that
//! has neither, the language's registry at the contract's version.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sdk {
    /// `plugins/` of a checkout: `sdk`, `sdk-js` and `sdk-python` in it.
    Checkout(PathBuf),
    /// A folder of packaged SDKs.
    Packages(PathBuf),
    /// crates.io, npm and PyPI.
    Registry,
}

/// `plugins/` of the checkout this binary was built from.
fn own_checkout() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins")
}

fn is_checkout(plugins: &Path) -> bool {
    std::fs::read_to_string(plugins.join("sdk/Cargo.toml")).is_ok_and(|t| t.contains("name = \"map-plugin-sdk\""))
}

/// The one file in `dir` whose name starts with `prefix` and ends with `suffix`.
fn package(dir: &Path, prefix: &str, suffix: &str) -> anyhow::Result<PathBuf> {
    let found = std::fs::read_dir(dir)?.filter_map(|e| e.ok().map(|e| e.path())).find(|p| {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        name.starts_with(prefix) && name.ends_with(suffix)
    });
    found.with_context(|| format!("no {prefix}…{suffix} in {}: make the packages with scripts/package-sdks.sh", dir.display()))
}

/// The unpacked crate `prefix…` in `dir`.
fn unpacked(dir: &Path, prefix: &str) -> anyhow::Result<PathBuf> {
    let crate_file = package(dir, prefix, ".crate")?;
    let unpacked = crate_file.with_extension("");
    anyhow::ensure!(unpacked.join("Cargo.toml").exists(), "{} is not unpacked beside {}", unpacked.display(), crate_file.display());
    Ok(unpacked)
}

impl Sdk {
    /// `--sdk PATH` (a checkout's `plugins/sdk` or `plugins/`, or a folder of
    /// packages), else this binary's checkout if it is still there, else the registries.
    pub fn find(given: Option<PathBuf>) -> anyhow::Result<Sdk> {
        let Some(path) = given else {
            let own = own_checkout();
            return Ok(if is_checkout(&own) { Sdk::Checkout(own.canonicalize()?) } else { Sdk::Registry });
        };
        let packages = std::fs::read_dir(&path).is_ok_and(|mut d| d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".crate"))));
        if packages {
            return Ok(Sdk::Packages(path.canonicalize()?));
        }
        for plugins in [path.join(".."), path.clone()] {
            if is_checkout(&plugins) {
                return Ok(Sdk::Checkout(plugins.canonicalize()?));
            }
        }
        bail!("no map-plugin-sdk at {}: pass --sdk with plugins/sdk of a map-gateway checkout, or a folder scripts/package-sdks.sh made", path.display())
    }

    /// Where a new plugin is installed to try it (a checkout's `plugins/dist`).
    pub fn dist(&self) -> PathBuf {
        match self {
            Sdk::Checkout(plugins) => plugins.join("dist"),
            _ => PathBuf::from("plugins"),
        }
    }

    /// How the README names it.
    pub fn describe(&self) -> String {
        match self {
            Sdk::Checkout(plugins) => format!("the checkout's {}", plugins.display()),
            Sdk::Packages(dir) => format!("the packages in {}", dir.display()),
            Sdk::Registry => "its registry".into(),
        }
    }

    /// The lock file a Rust project starts from: the SDK workspace's, with
    /// the versions the SDK is tested with.
    pub fn cargo_lock(&self) -> Option<String> {
        match self {
            Sdk::Checkout(plugins) => std::fs::read_to_string(plugins.join("Cargo.lock")).ok(),
            Sdk::Packages(dir) => std::fs::read_to_string(unpacked(dir, "map-plugin-sdk-").ok()?.join("Cargo.lock")).ok(),
            Sdk::Registry => None,
        }
    }

    /// The `map-plugin-sdk` dependency line, and a `[patch.crates-io]` table
    /// when the crates are packages not yet fetched from the registry.
    pub fn rust(&self, version: &str) -> anyhow::Result<(String, String)> {
        let quote = |p: &Path| toml::Value::String(p.to_string_lossy().into_owned()).to_string();
        Ok(match self {
            Sdk::Checkout(plugins) => (format!("map-plugin-sdk = {{ path = {} }}", quote(&plugins.join("sdk"))), String::new()),
            Sdk::Packages(dir) => {
                let (sdk, protocol) = (unpacked(dir, "map-plugin-sdk-")?, unpacked(dir, "map-protocol-")?);
                let patch = format!(
                    "\n# The packaged SDK, used as the registry's.\n[patch.crates-io]\nmap-plugin-sdk = {{ path = {} }}\nmap-protocol = {{ path = {} }}\n",
                    quote(&sdk),
                    quote(&protocol)
                );
                (format!("map-plugin-sdk = \"{version}\""), patch)
            }
            Sdk::Registry => (format!("map-plugin-sdk = \"{version}\""), String::new()),
        })
    }

    /// The `@map-gateway/plugin-sdk` dependency of package.json.
    pub fn js(&self, version: &str) -> anyhow::Result<String> {
        Ok(match self {
            Sdk::Checkout(plugins) => format!("file:{}", plugins.join("sdk-js").display()),
            Sdk::Packages(dir) => format!("file:{}", package(dir, "map-gateway-plugin-sdk-", ".tgz")?.display()),
            Sdk::Registry => version.to_string(),
        })
    }

    /// Where build.sh finds the `map_plugin` package, and what it installs
    /// there with pip when it is not there yet: a checkout's folder as it is
    /// (the SDK as it is being changed), else `.sdk` and the wheel or
    /// `map-gateway-plugin-sdk` from the registry.
    pub fn python(&self, version: &str) -> anyhow::Result<(String, String)> {
        Ok(match self {
            Sdk::Checkout(plugins) => {
                let dir = plugins.join("sdk-python").display().to_string();
                (dir.clone(), dir)
            }
            Sdk::Packages(dir) => (".sdk".into(), package(dir, "map_gateway_plugin_sdk-", ".whl")?.display().to_string()),
            Sdk::Registry => (".sdk".into(), format!("map-gateway-plugin-sdk=={version}")),
        })
    }
}
