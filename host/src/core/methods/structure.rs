//! `map/structure/graph`: agents as nodes, parent-child and peer edges.
//!
//! The agents are read a piece at a time (see `Directory::walk`) and the
//! graph is drawn on a blocking thread, so a directory of very many agents
//! stalls neither other requests nor the runtime.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::core::model::Agent;
use crate::core::registry::Viewer;
use crate::core::tracked::Directory;
use crate::core::{Active, Out};
use crate::rpc::{codes, Request, RpcError};

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
            Some(root) => family(dir, root, p.depth.unwrap_or(usize::MAX).max(1), &viewer).await?,
            None => dir.walk(|r| &r.agents, None, usize::MAX, |reg, a| reg.visible(a, &viewer).then(|| a.clone())).await,
        };
        let relationships = p.include_relationships;
        tokio::task::spawn_blocking(move || draw(&nodes, relationships))
            .await
            .map_err(|_| RpcError::internal("drawing the structure graph failed"))
    })))
}

/// A visible root and its descendants to `depth` levels that the viewer
/// may see (breadth first), a piece of a level per hold of the lock.
async fn family(dir: &Directory, root: &str, depth: usize, viewer: &Viewer<'_>) -> Result<Vec<Arc<Agent>>, RpcError> {
    let first = {
        let reg = dir.lock();
        reg.visible_agent(root, viewer)?;
        reg.agents.shared(root).ok_or_else(|| RpcError::new(codes::AGENT_NOT_FOUND, format!("Agent not found: {root}")))?
    };
    let mut seen = HashSet::from([root.to_string()]);
    let mut level: Vec<String> = first.children.clone();
    let mut nodes = vec![first];
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
    Ok(nodes)
}

/// The graph's JSON: parent-child edges between nodes, and (when asked)
/// a peer edge for each pair of nodes sharing a scope, in node order.
fn draw(nodes: &[Arc<Agent>], relationships: bool) -> Out {
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
    Out::Text(serde_json::to_string(&Graph { nodes, edges }).expect("the graph serialises"))
}
