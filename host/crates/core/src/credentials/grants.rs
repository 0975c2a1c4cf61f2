//! Who may get what: a grant lets a principal have scopes on resources,
//! each named exactly or by a prefix ending in `*`. A request no grant
//! covers is refused before any provider is asked.

use map_config::{pattern_matches, GrantConfig};

pub struct Grants(Vec<GrantConfig>);

impl Grants {
    pub fn new(grants: &[GrantConfig]) -> Grants {
        Grants(grants.to_vec())
    }

    /// Why `principal` may not have `scope` on `resource`; `None` when some grant allows it.
    pub fn refusal(&self, principal: &str, scope: &str, resource: &str) -> Option<String> {
        let mine = || self.0.iter().filter(|g| pattern_matches(&g.principal, principal));
        let scoped = || mine().filter(|g| g.scopes.iter().any(|s| pattern_matches(s, scope)));
        if mine().next().is_none() {
            return Some("no credentials are granted to this agent's principal".into());
        }
        if scoped().next().is_none() {
            return Some(format!("scope {scope:?} is not granted to this agent's principal"));
        }
        if !scoped().any(|g| g.resources.iter().any(|r| pattern_matches(r, resource))) {
            return Some(format!("scope {scope:?} is not granted on resource {resource:?}"));
        }
        None
    }

    /// The scope patterns granted to `principal`, each with the resource
    /// patterns it is granted on (grants of one scope merged), in grant order.
    pub fn of(&self, principal: &str) -> Vec<(String, Vec<String>)> {
        let mut granted: Vec<(String, Vec<String>)> = Vec::new();
        for g in self.0.iter().filter(|g| pattern_matches(&g.principal, principal)) {
            for scope in &g.scopes {
                let at = match granted.iter().position(|(s, _)| s == scope) {
                    Some(i) => i,
                    None => {
                        granted.push((scope.clone(), Vec::new()));
                        granted.len() - 1
                    }
                };
                let resources = &mut granted[at].1;
                for r in &g.resources {
                    if !resources.contains(r) {
                        resources.push(r.clone());
                    }
                }
            }
        }
        granted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(principal: &str, scopes: &[&str], resources: &[&str]) -> GrantConfig {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        GrantConfig { principal: principal.into(), scopes: own(scopes), resources: own(resources) }
    }

    #[test]
    fn grants_allow_exactly_what_they_name() {
        let g = Grants::new(&[
            grant("alice", &["github:repo:read"], &["acme/*"]),
            grant("svc-*", &["corp:*"], &["*"]),
            grant("alice", &["github:repo:read"], &["globex/site"]),
        ]);
        assert_eq!(g.refusal("alice", "github:repo:read", "acme/frontend"), None);
        assert_eq!(g.refusal("alice", "github:repo:read", "globex/site"), None);
        assert!(g.refusal("alice", "github:repo:read", "globex/other").unwrap().contains("on resource"));
        assert!(g.refusal("alice", "github:repo:write", "acme/frontend").unwrap().contains("not granted to this agent's principal"));
        assert!(g.refusal("bob", "github:repo:read", "acme/frontend").unwrap().contains("no credentials"));
        assert_eq!(g.refusal("svc-build", "corp:deploy", "anything"), None);
        assert_eq!(g.of("alice"), vec![("github:repo:read".to_string(), vec!["acme/*".to_string(), "globex/site".to_string()])]);
        assert!(g.of("bob").is_empty());
    }
}
