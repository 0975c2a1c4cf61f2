//! The hierarchy: `map/structure/graph` (agents as nodes, parent-child and
//! peer edges) and `map/agents/get` (an agent with its family).
//!
//! Agents are read a piece at a time (see `Directory::walk`) and answers
//! are written on a blocking thread, so a directory of very many agents
//! stalls neither other requests nor the runtime.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::agent_permissions;
use crate::directory::Directory;
use crate::model::Agent;
use crate::registry::Viewer;
use crate::{Active, Out};
use map_protocol::rpc::{codes, Request, RpcError};

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct GraphParams {
    root_agent_id: Option<String>,
    depth: Option<usize>,
    include_relationships: bool,
}

#[derive(Serialize)]
struct Edge<'a> {
    from: &'a str,
    to: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct Graph<'a> {
    nodes: &'a [Arc<Agent>],
    edges: Vec<Edge<'a>>,
}

/// Agents looked at per hold of the directory lock while following a root's descendants.
const LEVEL_CHUNK: usize = 512;

pub fn graph(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let p: GraphParams = req.params()?;
    let active = active.clone();
    Ok(Out::Later(Box::pin(async move {
        let dir = &active.tenant.registry;
        let viewer = active.viewer();
        let nodes = match &p.root_agent_id {
            Some(root) => {
                let root = visible(dir, root, &viewer)?;
                let below = family(dir, &root, p.depth.unwrap_or(usize::MAX).max(1), &viewer).await;
                std::iter::once(root).chain(below).collect()
            }
            None => dir.walk(|r| &r.agents, None, usize::MAX, |reg, a| reg.visible(a, &viewer).then(|| a.clone())).await,
        };
        let relationships = p.include_relationships;
        let edges = edges_seen(dir, &active.session_id);
        blocking(move || draw(&nodes, relationships, edges)).await
    })))
}

/// Long work (writing a large answer) on a blocking thread.
async fn blocking(work: impl FnOnce() -> Out + Send + 'static) -> Result<Out, RpcError> {
    tokio::task::spawn_blocking(work).await.map_err(|_| RpcError::internal("writing the answer failed"))
}

/// An agent the viewer may see, shared; a hidden one is "not found" (2001).
fn visible(dir: &Directory, id: &str, viewer: &Viewer<'_>) -> Result<Arc<Agent>, RpcError> {
    let reg = dir.lock();
    reg.visible_agent(id, viewer)?;
    reg.agents.shared(id).ok_or_else(|| RpcError::new(codes::AGENT_NOT_FOUND, format!("Agent not found: {id}")))
}

/// The descendants of `root` to `depth` levels that the viewer may see
/// (breadth first; hidden ones are passed through), a piece of a level per
/// hold of the lock.
async fn family(dir: &Directory, root: &Agent, depth: usize, viewer: &Viewer<'_>) -> Vec<Arc<Agent>> {
    let mut seen = HashSet::from([root.id.clone()]);
    let mut level: Vec<String> = root.children.clone();
    let mut nodes = Vec::new();
    for _ in 0..depth {
        let mut next = Vec::new();
        for piece in level.chunks(LEVEL_CHUNK) {
            {
                let reg = dir.lock();
                for id in piece.iter().filter(|id| seen.insert(id.to_string())) {
                    let Some(agent) = reg.agents.shared(id) else { continue };
                    next.extend(agent.children.iter().cloned());
                    if reg.visible(&agent, viewer) {
                        nodes.push(agent);
                    }
                }
            }
            tokio::task::yield_now().await;
        }
        if next.is_empty() {
            break;
        }
        level = next;
    }
    nodes
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Include {
    parent: bool,
    children: bool,
    siblings: bool,
    ancestors: bool,
    descendants: bool,
    max_depth: Option<usize>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct GetParams {
    agent_id: Option<String>,
    include: Include,
}

pub fn get(active: &Active, req: &Request) -> Result<Out, RpcError> {
    let p: GetParams = req.params()?;
    let id = p.agent_id.clone().ok_or_else(|| RpcError::invalid_params("agentId is required"))?;
    let active = active.clone();
    Ok(Out::Later(Box::pin(async move {
        let dir = &active.tenant.registry;
        let viewer = active.viewer();
        let include = &p.include;
        let depth = include.max_depth.unwrap_or(usize::MAX).max(1);
        let agent = visible(dir, &id, &viewer)?;
        // The parent (even one the viewer may not see: its children are the siblings), and the ancestors.
        let (parent, parent_seen, ancestors) = {
            let reg = dir.lock();
            let parent = agent.parent.as_deref().and_then(|x| reg.agents.shared(x));
            let parent_seen = parent.as_ref().is_some_and(|x| reg.visible(x, &viewer));
            let see = |i: &String| reg.agents.shared(i).filter(|a| reg.visible(a, &viewer));
            let ancestors: Vec<Arc<Agent>> = if include.ancestors { reg.ancestors(&id, depth).iter().filter_map(see).collect() } else { Vec::new() };
            (parent, parent_seen, ancestors)
        };
        let shown_parent = parent.clone().filter(|_| include.parent && parent_seen);
        let mut many: Vec<(&'static str, Vec<Arc<Agent>>)> = Vec::new();
        if include.children {
            many.push(("children", family(dir, &agent, 1, &viewer).await));
        }
        if include.siblings {
            let siblings = match &parent {
                Some(parent) => family(dir, parent, 1, &viewer).await.into_iter().filter(|s| s.id != id).collect(),
                None => Vec::new(),
            };
            many.push(("siblings", siblings));
        }
        if include.ancestors {
            many.push(("ancestors", ancestors));
        }
        if include.descendants {
            many.push(("descendants", family(dir, &agent, depth, &viewer).await));
        }
        blocking(move || {
            let mut result = json!({"agent": agent});
            if let Some(parent) = shown_parent {
                result["parent"] = json!(parent);
            }
            for (key, agents) in many {
                result[key] = json!(agents);
            }
            Out::Text(result.to_string())
        })
        .await
    })))
}

/// Which edges the session's agents' `canSee.structure` shows: all (`full`,
/// None), those touching its own agents (`local`), or none.
fn edges_seen(dir: &Directory, session: &str) -> Option<HashSet<String>> {
    let reg = dir.lock();
    match agent_permissions::structure(&*reg, session) {
        "full" => None,
        "local" => Some(reg.sessions.get(session).map(|s| s.agents.iter().cloned().collect()).unwrap_or_default()),
        _ => Some(HashSet::new()),
    }
}

/// The graph's JSON: parent-child edges between nodes, and (when asked)
/// a peer edge for each pair of nodes sharing a scope, in node order;
/// only edges touching `only` when given.
fn draw(nodes: &[Arc<Agent>], relationships: bool, only: Option<HashSet<String>>) -> Out {
    let at: HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, a)| (a.id.as_str(), i)).collect();
    let mut edges = Vec::new();
    for a in nodes {
        if let Some(parent) = a.parent.as_deref().filter(|p| at.contains_key(p)) {
            edges.push(Edge { from: parent, to: &a.id, kind: "parent-child" });
        }
    }
    if relationships {
        let mut members: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, a) in nodes.iter().enumerate() {
            for s in &a.scopes {
                members.entry(s.as_str()).or_default().push(i);
            }
        }
        for (i, a) in nodes.iter().enumerate() {
            let mut peers: Vec<usize> = a.scopes.iter().flat_map(|s| members[s.as_str()].iter().copied().filter(|&j| j > i)).collect();
            peers.sort_unstable();
            peers.dedup();
            edges.extend(peers.into_iter().map(|j| Edge { from: &a.id, to: &nodes[j].id, kind: "peer" }));
        }
    }
    if let Some(only) = only {
        edges.retain(|e| only.contains(e.from) || only.contains(e.to));
    }
    Out::Text(serde_json::to_string(&Graph { nodes, edges }).expect("the graph serialises"))
}
