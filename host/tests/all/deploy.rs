//! The deployment files in `deploy/`: the Kubernetes manifests are valid
//! against the API's schemas (kubernetes-validate, strict: no unknown
//! field), and the gateway accepts the configuration each of them and the
//! compose file give it (the ConfigMap's file with the StatefulSet's
//! variables; the compose services' variables), each node with its own name.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use crate::common::*;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The venv `scripts/setup.sh --tests` makes for kubernetes-validate (with PyYAML).
fn k8s_env() -> PathBuf {
    let env = repo().join("target/k8s-pyenv/bin");
    assert!(env.join("kubernetes-validate").exists(), "{} is missing: run scripts/setup.sh --tests", env.display());
    env
}

/// Every document of a YAML file, as JSON (read by the venv's PyYAML).
fn yaml(file: &str) -> Vec<Value> {
    let script = "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))";
    let out = Command::new(k8s_env().join("python")).args(["-c", script]).arg(repo().join(file)).output().expect("python runs");
    assert!(out.status.success(), "{file}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}

/// `map-gateway config` with these variables (and the file, if any): the effective configuration.
fn effective(config: Option<&PathBuf>, vars: &[(String, String)]) -> toml::Value {
    let mut command = Command::new(BIN);
    command.arg("config").env_clear().envs(vars.iter().map(|(k, v)| (k, v)));
    if let Some(file) = config {
        command.arg("--config").arg(file);
    }
    let out = command.output().expect("map-gateway config runs");
    assert!(out.status.success(), "{vars:?}: {}", String::from_utf8_lossy(&out.stderr));
    toml::from_str(&String::from_utf8_lossy(&out.stdout)).expect("TOML")
}

#[test]
fn kubernetes_manifests_are_valid_against_the_api_schemas() {
    let files: Vec<PathBuf> = std::fs::read_dir(repo().join("deploy/kubernetes")).unwrap().map(|e| e.unwrap().path()).collect();
    let out = Command::new(k8s_env().join("kubernetes-validate")).args(["--strict", "--no-warn"]).args(&files).output().expect("kubernetes-validate runs");
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{report}");
    for kind in ["configmap/", "statefulset/", "service/map-gateway ", "service/map-gateway-nodes", "poddisruptionbudget/", "secret/"] {
        assert!(report.contains(&format!("passed for resource {kind}")), "{kind}: {report}");
    }
}

#[test]
fn the_statefulset_gives_the_gateway_a_configuration_it_accepts() {
    let docs: Vec<Value> = ["configmap.yaml", "statefulset.yaml"].iter().flat_map(|f| yaml(&format!("deploy/kubernetes/{f}"))).collect();
    let toml_text = docs[0]["data"]["gateway.toml"].as_str().expect("the ConfigMap holds gateway.toml");
    let dir = TempDir::new("k8s");
    let file = dir.path().join("gateway.toml");
    std::fs::write(&file, toml_text).unwrap();
    let container = &docs[1]["spec"]["template"]["spec"]["containers"][0];
    // Variables from the pod's fields and the Secret: stand-in values of their kind.
    let vars: Vec<(String, String)> = container["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["name"] != "MAP_GATEWAY_CONFIG")
        .map(|v| {
            let value = match (&v["value"], &v["valueFrom"]["secretKeyRef"]["key"]) {
                (Value::String(s), _) => s.clone(),
                (_, Value::String(k)) if k == "storage-url" => "postgres://map:secret@postgres:5432/map".into(),
                (_, Value::String(_)) => "a-long-random-admin-token".into(),
                _ => "map-gateway-0".into(),
            };
            (v["name"].as_str().unwrap().to_string(), value)
        })
        .collect();
    let config = effective(Some(&file), &vars);
    assert_eq!(config["cluster"]["node"].as_str(), Some("map-gateway-0"), "the pod's name is its node name");
    assert_eq!(config["cluster"]["nats"].as_str(), Some("nats://nats:4222"));
    assert_eq!(config["server"]["data_dir"].as_str(), Some("/data"));
    let drain = config["server"]["drain_secs"].as_integer().unwrap();
    let grace = docs[1]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap();
    assert!(drain < grace, "drain_secs {drain} within terminationGracePeriodSeconds {grace}");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
}

#[test]
fn the_compose_file_runs_three_nodes_of_one_cluster() {
    let compose = &yaml("deploy/compose.yaml")[0];
    let gateways: Vec<(&String, &Value)> = compose["services"].as_object().unwrap().iter().filter(|(name, _)| name.starts_with("gateway-")).collect();
    assert_eq!(gateways.len(), 3);
    let mut nodes = Vec::new();
    for (name, service) in gateways {
        let vars: Vec<(String, String)> =
            service["environment"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string())).collect();
        let config = effective(None, &vars);
        assert_eq!(config["cluster"]["name"].as_str(), Some("map"), "{name}");
        assert!(config["storage"]["url"].as_str().unwrap().starts_with("postgres://"), "{name}");
        nodes.push(config["cluster"]["node"].as_str().unwrap().to_string());
    }
    nodes.dedup();
    assert_eq!(nodes, ["gateway-1", "gateway-2", "gateway-3"]);
}
