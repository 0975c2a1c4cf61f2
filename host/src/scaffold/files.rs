//! What `plugin new` writes for Python and JavaScript, embedded in the
//! binary so a project needs nothing of a checkout: the templates, the
//! language's plugin SDK, and the contract.

/// A Python project: the app, its build, and the SDK's module from
/// plugins/sdk-python (so the project builds with only this binary installed).
macro_rules! python_files {
    ([$($own:literal),*], [$($sdk:literal),*]) => {[
        $(($own, include_str!(concat!("python/", $own))),)*
        $((concat!("map_plugin/", $sdk), include_str!(concat!("../../../plugins/sdk-python/map_plugin/", $sdk))),)*
    ]};
}
pub const PYTHON: [(&str, &str); 21] = python_files!(
    ["app.py", "build.sh"],
    [
        "__init__.py",
        "_contract.py",
        "_exports.py",
        "_json.py",
        "_wit.py",
        "call.py",
        "config.py",
        "errors.py",
        "events.py",
        "extension.py",
        "ids.py",
        "log.py",
        "metrics.py",
        "params.py",
        "py.typed",
        "resources.py",
        "router.py",
        "store.py",
        "timers.py"
    ]
);
/// A JavaScript project: the plugin, its build, and the JavaScript plugin
/// SDK from plugins/sdk-js under sdk/ (package.json links it), so the
/// project builds with only this binary installed.
macro_rules! js_files {
    ([$($own:literal),*], [$($sdk:literal),*]) => {[
        $(($own, include_str!(concat!("js/", $own))),)*
        $((concat!("sdk/", $sdk), include_str!(concat!("../../../plugins/sdk-js/", $sdk))),)*
    ]};
}
pub const JS: [(&str, &str); 16] = js_files!(
    ["plugin.js", "build.mjs", "package.json", "build.sh"],
    [
        "package.json",
        "build.mjs",
        "index.d.ts",
        "build.d.ts",
        "README.md",
        "src/call.js",
        "src/errors.js",
        "src/extension.js",
        "src/host.js",
        "src/imports.js",
        "src/index.js",
        "src/store.js"
    ]
);

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
    fn python_projects_carry_every_file_of_the_sdk() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/sdk-python/map_plugin");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if path.is_file() && (name.ends_with(".py") || name == "py.typed") {
                let embedded = PYTHON.iter().find(|(f, _)| *f == format!("map_plugin/{name}"));
                assert_eq!(embedded.map(|(_, text)| *text), Some(std::fs::read_to_string(&path).unwrap().as_str()), "{name}");
            }
        }
        // `fill` runs over every file: the SDK's must come through unchanged.
        for (file, text) in PYTHON.iter().filter(|(f, _)| f.starts_with("map_plugin/")) {
            assert!(!["@NAME@", "@CONTRACT_VERSION@", "@ERR_"].iter().any(|t| text.contains(t)), "{file}");
        }
    }

    #[test]
    fn js_projects_carry_every_file_of_the_sdk() {
        let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/sdk-js");
        let src = std::fs::read_dir(sdk.join("src")).unwrap().map(|e| format!("src/{}", e.unwrap().file_name().to_string_lossy()));
        for file in src.chain(["package.json", "build.mjs", "index.d.ts", "build.d.ts"].map(String::from)) {
            let embedded = JS.iter().find(|(f, _)| *f == format!("sdk/{file}"));
            assert_eq!(embedded.map(|(_, text)| *text), Some(std::fs::read_to_string(sdk.join(&file)).unwrap().as_str()), "{file}");
        }
        // `fill` runs over every file: the SDK's must come through unchanged.
        for (file, text) in JS.iter().filter(|(f, _)| f.starts_with("sdk/")) {
            assert!(!["@NAME@", "@CONTRACT_VERSION@", "@ERR_"].iter().any(|t| text.contains(t)), "{file}");
        }
    }

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
