//! Agent-level permissions (MAP's `AgentPermissions`): which agents and
//! scopes an agent sees, whom it may message, and whom it accepts messages
//! from.
//!
//! An agent's effective rules are, per key: its own `permissionOverrides`,
//! then (for `canSee.agents` only) its legacy `visibility`, then the
//! tenant's template for its role, then the tenant's default, then open
//! (`all`, `full`), as the SDK resolves them. Rules only narrow what the
//! other layers (session grants, scope policies, exposure) allow.
//!
//! Checks cost nothing until the tenant uses the feature: the registry's flag
//! latches on at the first override, non-public visibility or restrictive template.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::model::{Agent, Scope};

/// Every rule: section, key, the named values it takes, whether `{include: [ids]}` is allowed.
const RULES: &[(&str, &str, &[&str], bool)] = &[
    ("canSee", "agents", &["all", "hierarchy", "scoped", "direct"], true),
    ("canSee", "scopes", &["all", "member"], true),
    ("canSee", "structure", &["full", "local", "none"], false),
    ("canMessage", "agents", &["all", "hierarchy", "scoped"], true),
    ("canMessage", "scopes", &["all", "member"], true),
    ("acceptsFrom", "agents", &["all", "hierarchy", "scoped"], true),
    ("acceptsFrom", "clients", &["all", "none"], true),
    ("acceptsFrom", "systems", &["all", "none"], true),
];

/// The rule that holds where nobody set one.
fn open(section: &str, key: &str) -> &'static str {
    if (section, key) == ("canSee", "structure") {
        "full"
    } else {
        "all"
    }
}

/// Check a (partial) `AgentPermissions` object. `null` values are allowed
/// where `removable` (an update removing an override).
pub fn parse(value: &Value, removable: bool) -> Result<Map<String, Value>, String> {
    let Some(sections) = value.as_object() else { return Err("permissionOverrides must be an object".into()) };
    for (section, keys) in sections {
        if !RULES.iter().any(|r| r.0 == section) {
            return Err(format!("permissionOverrides.{section} is not a section (canSee, canMessage, acceptsFrom)"));
        }
        let Some(keys) = keys.as_object() else { return Err(format!("permissionOverrides.{section} must be an object")) };
        for (key, rule) in keys {
            let Some(&(_, _, named, include)) = RULES.iter().find(|r| r.0 == section && r.1 == key) else {
                return Err(format!("permissionOverrides.{section}.{key} is not a rule (canSee.agents|scopes|structure, canMessage.agents|scopes, acceptsFrom.agents|clients|systems)"));
            };
            let ok = match rule {
                Value::Null => removable,
                Value::String(s) => named.contains(&s.as_str()),
                Value::Object(o) => include && o.len() == 1 && o.get("include").and_then(Value::as_array).is_some_and(|ids| ids.iter().all(Value::is_string)),
                _ => false,
            };
            if !ok {
                let forms = if include { format!("{} or {{include: [ids]}}", named.join(", ")) } else { named.join(", ") };
                return Err(format!("permissionOverrides.{section}.{key} must be one of {forms}"));
            }
        }
    }
    Ok(sections.clone())
}

/// Merge `changes` into `base` per section: given keys overwrite, `null` removes.
pub fn merge(base: &mut Map<String, Value>, changes: &Map<String, Value>) {
    for (section, keys) in changes {
        let Some(keys) = keys.as_object() else { continue };
        let target = base.entry(section.clone()).or_insert_with(|| json!({}));
        let Some(target) = target.as_object_mut() else { continue };
        for (key, rule) in keys {
            if rule.is_null() {
                target.remove(key);
            } else {
                target.insert(key.clone(), rule.clone());
            }
        }
        if target.is_empty() {
            base.remove(section);
        }
    }
}

/// A tenant's templates: the default for every agent and one per role.
#[derive(Debug, Default)]
pub struct Policy {
    default: Map<String, Value>,
    roles: BTreeMap<String, Map<String, Value>>,
    /// The tenant's `admin_principals` (empty: `system` participants are admins).
    admins: Vec<String>,
}

impl Policy {
    /// From a tenant's `agent_permissions` (checked as overrides are) and `admin_principals`.
    pub fn from_config(tenant: &map_config::TenantConfig) -> Result<Policy, String> {
        let section = |what: &str, v: &Value| parse(v, false).map_err(|e| format!("agent_permissions.{what}: {e}"));
        let admins = tenant.admin_principals.clone();
        let Some(config) = &tenant.agent_permissions else { return Ok(Policy { admins, ..Policy::default() }) };
        let default = if config.default.is_null() { Map::new() } else { section("default", &config.default)? };
        let roles = config.roles.iter().map(|(role, v)| Ok((role.clone(), section(&format!("roles.{role}"), v)?))).collect::<Result<_, String>>()?;
        Ok(Policy { default, roles, admins })
    }

    /// Whether a caller is one of the tenant's admins: a principal it names,
    /// or, where it names none, a `system` participant (a claim made at
    /// `map/connect`, so tenants where that matters name their admins).
    pub fn is_admin(&self, participant_type: &str, principal: &str) -> bool {
        if self.admins.is_empty() {
            participant_type == "system"
        } else {
            self.admins.iter().any(|a| a == principal)
        }
    }

    /// Refuse overrides of keys the operator's templates set, unless the caller is an admin.
    pub fn check_overrides(&self, role: Option<&str>, changes: &Map<String, Value>, admin: bool) -> Result<(), String> {
        if admin {
            return Ok(());
        }
        for (section, keys) in changes {
            if let Some(key) = keys.as_object().and_then(|k| k.keys().find(|key| self.sets(role, section, key))) {
                return Err(format!("{section}.{key} is set by the tenant's agent_permissions; only an admin may override it"));
            }
        }
        Ok(())
    }

    /// Whether any template narrows anything (else only agents' own settings can).
    pub fn restrictive(&self) -> bool {
        std::iter::once(&self.default)
            .chain(self.roles.values())
            .any(|t| t.iter().any(|(section, keys)| keys.as_object().is_some_and(|k| k.iter().any(|(key, rule)| rule.as_str() != Some(open(section, key))))))
    }

    /// Whether a template sets this key for an agent of `role`: the operator's
    /// setting, which only an admin may override.
    pub fn sets(&self, role: Option<&str>, section: &str, key: &str) -> bool {
        let has = |t: &Map<String, Value>| t.get(section).and_then(|s| s.get(key)).is_some();
        has(&self.default) || role.and_then(|r| self.roles.get(r)).is_some_and(has)
    }

    /// The rule in force for `agent` at `section.key`.
    pub fn rule<'a>(&'a self, agent: &'a Agent, section: &str, key: &str) -> Rule<'a> {
        let at = |t: &'a Map<String, Value>| t.get(section).and_then(|s| s.get(key));
        if let Some(v) = agent.permission_overrides.as_ref().and_then(|o| o.as_object()).and_then(at) {
            return Rule::of(v);
        }
        if (section, key) == ("canSee", "agents") {
            if let Some(v) = agent.visibility.as_deref() {
                return Rule::Named(legacy(v));
            }
        }
        let role = agent.role.as_deref().and_then(|r| self.roles.get(r));
        match role.and_then(at).or_else(|| at(&self.default)) {
            Some(v) => Rule::of(v),
            None => Rule::Named(open(section, key)),
        }
    }

    /// An agent's effective rules, whole (for answers and events).
    pub fn effective(&self, agent: &Agent) -> Value {
        let mut out = Map::new();
        for &(section, key, _, _) in RULES {
            let rule = match self.rule(agent, section, key) {
                Rule::Named(n) => json!(n),
                Rule::Include(ids) => json!({"include": ids}),
            };
            out.entry(section).or_insert_with(|| json!({}))[key] = rule;
        }
        Value::Object(out)
    }
}

/// Each tenant's templates as a configuration says: all built (one that
/// does not parse fails them all) before any is installed, at start and on reload.
pub(crate) struct Policies(Vec<(String, Policy)>);

impl Policies {
    pub(crate) fn build(config: &map_config::Config) -> anyhow::Result<Policies> {
        let mut out = Vec::new();
        for t in &config.tenants {
            let policy = Policy::from_config(t).map_err(|e| anyhow::anyhow!("tenant {:?}: {e}", t.id))?;
            out.push((t.id.clone(), policy));
        }
        Ok(Policies(out))
    }

    pub(crate) fn install(self, tenants: &super::Tenants) {
        for (id, policy) in self.0 {
            if let Some(tenant) = tenants.get(&id) {
                let mut reg = tenant.registry.lock();
                reg.agent_rules |= policy.restrictive();
                reg.agent_policy = std::sync::Arc::new(policy);
            }
        }
    }
}

/// Legacy `visibility` as a `canSee.agents` rule (as the SDK maps it).
fn legacy(visibility: &str) -> &'static str {
    match visibility {
        "parent-only" => "hierarchy",
        "scope" => "scoped",
        "system" => "direct",
        _ => "all",
    }
}

/// One rule as read: a named value or an allowlist.
pub enum Rule<'a> {
    Named(&'a str),
    Include(&'a [Value]),
}

impl<'a> Rule<'a> {
    fn of(v: &'a Value) -> Rule<'a> {
        match v {
            Value::String(s) => Rule::Named(s),
            _ => Rule::Include(v.get("include").and_then(Value::as_array).map_or(&[], Vec::as_slice)),
        }
    }

    fn includes(&self, id: &str) -> bool {
        matches!(self, Rule::Include(ids) if ids.iter().any(|v| v.as_str() == Some(id)))
    }
}

/// What the checks read of a tenant's directory (the registry implements it).
pub trait Agents {
    fn agent(&self, id: &str) -> Option<&Agent>;
    /// The agents a session owns.
    fn owned_by(&self, session: &str) -> Vec<&Agent>;
    /// The tenant's templates, when agent-level rules are in use (else no check applies).
    fn rules(&self) -> Option<&Policy>;
}

/// Whether two agents are in one line of descent (either is the other's ancestor).
fn related(reg: &impl Agents, a: &Agent, b: &Agent) -> bool {
    let up = |from: &Agent, to: &str| {
        let mut cur = from.parent.as_deref();
        for _ in 0..1024 {
            match cur {
                Some(p) if p == to => return true,
                Some(p) => cur = reg.agent(p).and_then(|x| x.parent.as_deref()),
                None => return false,
            }
        }
        false
    };
    up(a, &b.id) || up(b, &a.id)
}

fn share_scope(a: &Agent, b: &Agent) -> bool {
    a.scopes.iter().any(|s| b.scopes.contains(s))
}

/// Whether an agent-to-agent rule (`all|hierarchy|scoped|direct|{include}`) lets `me` reach `other`.
fn agent_rule(reg: &impl Agents, rule: Rule, me: &Agent, other: &Agent) -> bool {
    match rule {
        Rule::Named("all") => true,
        Rule::Named("hierarchy") => related(reg, me, other),
        Rule::Named("scoped") => share_scope(me, other),
        Rule::Include(_) => rule.includes(&other.id),
        _ => false,
    }
}

/// Whether a scope rule (`all|member|{include}`) lets `me` reach `scope`.
fn scope_rule(rule: Rule, me: &Agent, scope: &Scope) -> bool {
    match rule {
        Rule::Named("all") => true,
        Rule::Named("member") => me.scopes.contains(&scope.id),
        Rule::Include(_) => rule.includes(&scope.id),
        _ => false,
    }
}

/// The agents a session speaks for, with the templates, when agent rules
/// are in use (none: no agent layer).
fn speakers<'a, A: Agents>(reg: &'a A, session: &str) -> Option<(&'a Policy, Vec<&'a Agent>)> {
    let policy = reg.rules()?;
    Some((policy, reg.owned_by(session))).filter(|(_, mine)| !mine.is_empty())
}

/// Whether a session's agents let it see `target`: a session without
/// agents is not limited here, its own agents are always seen, and
/// otherwise one of its agents must see it.
pub fn sees_agent(reg: &impl Agents, session: &str, target: &Agent) -> bool {
    let Some((policy, mine)) = speakers(reg, session) else { return true };
    target.session == session || mine.iter().any(|me| agent_rule(reg, policy.rule(me, "canSee", "agents"), me, target))
}

/// Whether a session's agents let it see a scope.
pub fn sees_scope(reg: &impl Agents, session: &str, scope: &Scope) -> bool {
    let Some((policy, mine)) = speakers(reg, session) else { return true };
    mine.iter().any(|me| scope_rule(policy.rule(me, "canSee", "scopes"), me, scope))
}

/// How much of the hierarchy a session sees: `full`, `local` (edges that
/// touch its own agents) or `none`; the widest of its agents' rules.
pub fn structure(reg: &impl Agents, session: &str) -> &'static str {
    let Some((policy, mine)) = speakers(reg, session) else { return "full" };
    let rules: Vec<&str> = mine.iter().map(|me| if let Rule::Named(n) = policy.rule(me, "canSee", "structure") { n } else { "full" }).collect();
    if rules.contains(&"full") {
        "full"
    } else if rules.contains(&"local") {
        "local"
    } else {
        "none"
    }
}

/// Who sends, as acceptance rules tell senders apart.
pub enum Party<'a> {
    Agent(&'a Agent),
    Client(&'a str),
    /// A system or gateway participant, or a federated peer: its system id.
    System(&'a str),
}

/// Why a message may not pass: the sender's `canMessage` or the target's `acceptsFrom`.
pub fn refuses_message(reg: &impl Agents, from: &Party, target: &Agent) -> Option<String> {
    let policy = reg.rules()?;
    if let Party::Agent(me) = from {
        if me.id != target.id && !agent_rule(reg, policy.rule(me, "canMessage", "agents"), me, target) {
            return Some(format!("Agent {} may not message agent {} (canMessage.agents)", me.id, target.id));
        }
    }
    let accepts = match from {
        Party::Agent(me) => me.id == target.id || agent_rule(reg, policy.rule(target, "acceptsFrom", "agents"), target, me),
        Party::Client(id) => party_rule(policy.rule(target, "acceptsFrom", "clients"), id),
        Party::System(id) => party_rule(policy.rule(target, "acceptsFrom", "systems"), id),
    };
    (!accepts).then(|| format!("Agent {} does not accept messages from this sender (acceptsFrom)", target.id))
}

/// Whether the sender's `canMessage.scopes` lets it send to `scope`.
pub fn refuses_scope(reg: &impl Agents, from: &Party, scope: &Scope) -> Option<String> {
    let (Party::Agent(me), Some(policy)) = (from, reg.rules()) else { return None };
    (!scope_rule(policy.rule(me, "canMessage", "scopes"), me, scope)).then(|| format!("Agent {} may not send to scope {} (canMessage.scopes)", me.id, scope.id))
}

/// A client or system rule: `all|none|{include}`.
fn party_rule(rule: Rule, id: &str) -> bool {
    match rule {
        Rule::Named("all") => true,
        Rule::Include(_) => rule.includes(id),
        _ => false,
    }
}

/// Whether an agent's own settings switch the rules on (see `Agents::rules`).
pub fn uses_rules(agent: &Agent) -> bool {
    agent.permission_overrides.is_some() || agent.visibility.as_deref().is_some_and(|v| v != "public")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_checked_by_section_key_and_value() {
        assert!(parse(&json!({"canSee": {"agents": "hierarchy", "scopes": {"include": ["s"]}}}), false).is_ok());
        assert!(parse(&json!({"acceptsFrom": {"clients": "none", "agents": {"include": []}}}), false).is_ok());
        for bad in [
            json!("all"),
            json!({"canSee": "all"}),
            json!({"canSee": {"everything": "all"}}),
            json!({"canFly": {}}),
            json!({"canSee": {"agents": "member"}}),
            json!({"canSee": {"structure": {"include": ["a"]}}}),
            json!({"acceptsFrom": {"clients": {"include": [1]}}}),
            json!({"canMessage": {"agents": null}}),
        ] {
            assert!(parse(&bad, false).is_err(), "{bad}");
        }
        assert!(parse(&json!({"canMessage": {"agents": null}}), true).is_ok(), "an update may remove an override");
    }

    fn agent(extra: Value) -> Agent {
        let mut v = json!({"id": "a", "ownerId": "p", "state": "active", "lifecycle": {"createdAt": 1, "lastStateChange": 1}});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn effective_rules_go_override_visibility_role_default_open() {
        let tenant: map_config::TenantConfig = toml::from_str(
            r#"id = "t"
            agent_permissions = { default = { canSee = { agents = "scoped", scopes = "member" } }, roles = { worker = { canSee = { scopes = "all" }, acceptsFrom = { clients = "none" } } } }"#,
        )
        .unwrap();
        let policy = Policy::from_config(&tenant).unwrap();
        assert!(policy.restrictive() && !Policy::default().restrictive());
        let plain = policy.effective(&agent(json!({})));
        assert_eq!(plain["canSee"], json!({"agents": "scoped", "scopes": "member", "structure": "full"}));
        assert_eq!(plain["acceptsFrom"]["clients"], "all");
        let worker = policy.effective(&agent(json!({"role": "worker", "visibility": "parent-only"})));
        assert_eq!(worker["canSee"]["scopes"], "all", "the role's template over the default");
        assert_eq!(worker["canSee"]["agents"], "hierarchy", "legacy visibility over the templates");
        assert_eq!(worker["acceptsFrom"]["clients"], "none");
        let own =
            policy.effective(&agent(json!({"role": "worker", "visibility": "parent-only", "permissionOverrides": {"canSee": {"agents": {"include": ["b"]}}}})));
        assert_eq!(own["canSee"]["agents"], json!({"include": ["b"]}), "the agent's own override over everything");
        assert!(policy.sets(Some("worker"), "acceptsFrom", "clients") && policy.sets(None, "canSee", "agents") && !policy.sets(None, "canMessage", "agents"));
        assert!(policy.check_overrides(Some("worker"), &parse(&json!({"acceptsFrom": {"clients": "all"}}), true).unwrap(), false).is_err());
        assert!(policy.check_overrides(Some("worker"), &parse(&json!({"acceptsFrom": {"clients": "all"}}), true).unwrap(), true).is_ok());
    }

    #[test]
    fn merge_is_per_section_and_null_removes() {
        let mut base = parse(&json!({"canSee": {"agents": "scoped", "scopes": "member"}, "acceptsFrom": {"clients": "none"}}), false).unwrap();
        merge(&mut base, &parse(&json!({"canSee": {"agents": "all"}, "acceptsFrom": {"clients": null}}), true).unwrap());
        assert_eq!(Value::Object(base), json!({"canSee": {"agents": "all", "scopes": "member"}}));
    }
}
