//! Settings from the environment: `MAP_GATEWAY__SECTION__KEY=value` sets
//! `[section] key` over the file (a container or an orchestrator passes
//! settings and secrets this way). A value is read as a TOML value when it
//! is one (`4700`, `true`, `["a", "b"]`, `"quoted"`), else as a string.

use anyhow::{bail, Context};
use toml::{Table, Value};

/// The prefix of the variables read; levels are separated by `__`.
pub const PREFIX: &str = "MAP_GATEWAY__";

/// Set every `MAP_GATEWAY__…` variable of `vars` in `table`.
pub fn overlay(table: &mut Table, vars: impl IntoIterator<Item = (String, String)>) -> anyhow::Result<()> {
    let mut vars: Vec<(String, String)> = vars.into_iter().filter(|(k, _)| k.starts_with(PREFIX)).collect();
    vars.sort();
    for (name, value) in vars {
        let path: Vec<String> = name[PREFIX.len()..].split("__").map(str::to_ascii_lowercase).collect();
        if path.len() < 2 || path.iter().any(String::is_empty) {
            bail!("{name}: name a section and a key, as MAP_GATEWAY__SERVER__LISTEN");
        }
        if path[0] == "tenants" || path[0] == "plugins" {
            bail!("{name}: tenants and plugins are set in the configuration file");
        }
        set(table, &path, parse(&value)).with_context(|| name.clone())?;
    }
    Ok(())
}

/// A TOML value if the text is one, else the text as a string.
fn parse(text: &str) -> Value {
    match format!("v = {text}").parse::<Table>() {
        Ok(mut t) => t.remove("v").unwrap_or_else(|| Value::String(text.to_string())),
        Err(_) => Value::String(text.to_string()),
    }
}

fn set(table: &mut Table, path: &[String], value: Value) -> anyhow::Result<()> {
    let (key, sections) = path.split_last().expect("two parts at least");
    let mut at = table;
    for section in sections {
        let entry = at.entry(section.clone()).or_insert_with(|| Value::Table(Table::new()));
        at = match entry {
            Value::Table(t) => t,
            _ => bail!("{section} is not a section"),
        };
    }
    at.insert(key.clone(), value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn variables_set_keys_of_sections() {
        let mut t: Table = "[server]\nlisten = \"127.0.0.1:1\"\nname = \"a\"".parse().unwrap();
        let list = [
            ("MAP_GATEWAY__SERVER__LISTEN", "0.0.0.0:4700"),
            ("MAP_GATEWAY__SERVER__DRAIN_SECS", "5"),
            ("MAP_GATEWAY__CLUSTER__NATS", "nats://n:4222"),
            ("MAP_GATEWAY_LOG", "debug"),
            ("OTHER", "x"),
        ];
        overlay(&mut t, vars(&list)).unwrap();
        assert_eq!(t["server"]["listen"].as_str(), Some("0.0.0.0:4700"));
        assert_eq!(t["server"]["name"].as_str(), Some("a"));
        assert_eq!(t["server"]["drain_secs"].as_integer(), Some(5));
        assert_eq!(t["cluster"]["nats"].as_str(), Some("nats://n:4222"));
        assert_eq!(t.len(), 2);
    }

    #[test]
    fn tenants_and_malformed_names_are_refused() {
        for name in ["MAP_GATEWAY__TENANTS__ID", "MAP_GATEWAY__SERVER", "MAP_GATEWAY__SERVER____X"] {
            assert!(overlay(&mut Table::new(), vars(&[(name, "1")])).is_err(), "{name}");
        }
        let mut t: Table = "[server]\nname = \"a\"".parse().unwrap();
        assert!(overlay(&mut t, vars(&[("MAP_GATEWAY__SERVER__NAME__X", "1")])).is_err());
    }
}
