//! What `plugin new` writes for Python and JavaScript, embedded in the
//! binary so a project needs nothing of a checkout: the templates and the
//! contract (the SDK is a dependency, `sdk`).

/// A Python project: the app and its build (which installs the Python
/// plugin SDK, `map-gateway-plugin-sdk`, into the project's venv).
pub const PYTHON: [(&str, &str); 2] = [("app.py", include_str!("python/app.py")), ("build.sh", include_str!("python/build.sh"))];

/// A JavaScript project: the plugin, its build, and a package.json that
/// depends on the JavaScript plugin SDK (`@map-gateway/plugin-sdk`).
pub const JS: [(&str, &str); 5] = [
    ("plugin.js", include_str!("js/plugin.js")),
    ("build.mjs", include_str!("js/build.mjs")),
    ("package.json", include_str!("js/package.json")),
    ("build.sh", include_str!("js/build.sh")),
    (".npmrc", include_str!("js/npmrc")),
];

/// The contract (`wit/`), which Python and JavaScript projects bind against.
macro_rules! wit_files {
    ($($file:literal),*) => {[$((concat!("wit/", $file), include_str!(concat!("../../../wit/", $file))),)*]};
}
pub const WIT: [(&str, &str); 15] = wit_files!(
    "config.wit",
    "events.wit",
    "grpc.wit",
    "http.wit",
    "lifecycle.wit",
    "log.wit",
    "metrics.wit",
    "package.wit",
    "resources.wit",
    "router.wit",
    "rpc.wit",
    "send-observer.wit",
    "store.wit",
    "types.wit",
    "worlds.wit"
);

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn projects_carry_the_whole_contract() {
        let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
        let mut files: Vec<String> = std::fs::read_dir(&wit)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "wit"))
            .map(|p| format!("wit/{}", p.file_name().unwrap().to_string_lossy()))
            .collect();
        files.sort();
        assert_eq!(WIT.iter().map(|(f, _)| f.to_string()).collect::<Vec<_>>(), files, "every file of wit/, and only those");
        for (file, text) in WIT {
            assert_eq!(*text, std::fs::read_to_string(wit.join(&file[4..])).unwrap(), "{file}");
        }
    }
}
