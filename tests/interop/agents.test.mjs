// Agent registry, lifecycle control, structure graph, scopes, unregister/disconnect.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import {
  startGateway, connectAgent, connectClient, rawParticipant,
  rejectsWithCode, agentIds, uid,
} from './harness.mjs';

let gw;
let observer; // a ClientConnection used for queries
before(async () => {
  gw = await startGateway();
  observer = await connectClient(gw, { name: 'observer' });
});
after(async () => { await gw?.stop(); });

const sorted = (xs) => [...xs].sort();

test('map/agents/list returns registered agents with their fields', async () => {
  const role = uid('lister');
  const a = await connectAgent(gw, { name: 'list-a', role });
  const b = await connectAgent(gw, { name: 'list-b', role });
  const res = await observer.conn.listAgents();
  const ids = agentIds(res);
  assert.ok(ids.includes(a.id) && ids.includes(b.id), `list must contain ${a.id} and ${b.id}: ${ids}`);
  const ra = res.agents.find((x) => x.id === a.id);
  assert.equal(ra.name, 'list-a');
  assert.equal(ra.role, role);
  assert.equal(typeof ra.state, 'string');
  assert.equal(typeof ra.ownerId, 'string', 'agent.ownerId');
  assert.equal(ra.ownerId, a.participantId, 'ownerId is the participant that registered the agent');
});

test('map/agents/list filters: SDK {filter:{roles,states,parent,scopes}} and flat {role,state,scopeId}', async () => {
  const role = uid('filt');
  const other = uid('filt-other');
  const p = await connectAgent(gw, { name: 'filt-parent', role: other });
  const a = await connectAgent(gw, { name: 'filt-a', role, parent: p.id });
  const b = await connectAgent(gw, { name: 'filt-b', role, parent: p.id });
  const c = await connectAgent(gw, { name: 'filt-c', role: other });
  await b.conn.updateState('busy');

  let r = await observer.conn.listAgents({ filter: { roles: [role] } });
  assert.deepEqual(sorted(agentIds(r)), sorted([a.id, b.id]), 'filter.roles');
  r = await observer.conn.listAgents({ role });
  assert.deepEqual(sorted(agentIds(r)), sorted([a.id, b.id]), 'flat role');

  r = await observer.conn.listAgents({ filter: { roles: [role], states: ['busy'] } });
  assert.deepEqual(agentIds(r), [b.id], 'filter.roles AND filter.states');
  r = await observer.conn.listAgents({ role, state: 'busy' });
  assert.deepEqual(agentIds(r), [b.id], 'flat role AND state');

  r = await observer.conn.listAgents({ filter: { parent: p.id } });
  assert.deepEqual(sorted(agentIds(r)), sorted([a.id, b.id]), 'filter.parent');

  const scope = await c.conn.createScope({ name: uid('filt-scope') });
  await c.conn.joinScope(scope.id);
  await a.conn.joinScope(scope.id);
  r = await observer.conn.listAgents({ filter: { scopes: [scope.id] } });
  assert.deepEqual(sorted(agentIds(r)), sorted([a.id, c.id]), 'filter.scopes');
  r = await observer.conn.listAgents({ scopeId: scope.id });
  assert.deepEqual(sorted(agentIds(r)), sorted([a.id, c.id]), 'flat scopeId');
});

test('map/agents/list pagination: limit + nextCursor walks all agents without duplicates', async () => {
  const role = uid('page');
  const made = [];
  for (let i = 0; i < 5; i++) made.push((await connectAgent(gw, { name: `page-${i}`, role })).id);
  const seen = [];
  let cursor;
  let pages = 0;
  do {
    const r = await observer.conn.listAgents({ filter: { roles: [role] }, limit: 2, cursor });
    const ids = agentIds(r);
    assert.ok(ids.length <= 2, `limit 2 must be honoured, got ${ids.length}`);
    if (pages === 0) {
      assert.equal(ids.length, 2, 'first page is full');
      assert.equal(typeof r.nextCursor, 'string', 'more results → nextCursor');
    }
    seen.push(...ids);
    cursor = r.nextCursor;
    pages += 1;
    assert.ok(pages <= 5, 'pagination must terminate');
  } while (cursor);
  assert.deepEqual(sorted(seen), sorted(made), 'every agent exactly once');
});

test('map/agents/get returns {agent}, include children/parent/descendants, unknown id → 2001', async () => {
  const root = await connectAgent(gw, { name: 'get-root', role: 'root' });
  const kid = await connectAgent(gw, { name: 'get-kid', role: 'kid', parent: root.id });
  const grandkid = await connectAgent(gw, { name: 'get-grandkid', role: 'kid', parent: kid.id });

  const g = await observer.conn.getAgent(kid.id);
  assert.equal(g.agent.id, kid.id);
  assert.equal(g.agent.name, 'get-kid');
  assert.equal(g.agent.role, 'kid');
  assert.equal(g.agent.parent, root.id, 'agent.parent is the parent id');

  const gi = await observer.conn.getAgent(kid.id, { include: { children: true, parent: true, descendants: true } });
  assert.equal(gi.agent.id, kid.id);
  assert.ok(Array.isArray(gi.children), `include.children → children: Agent[], got ${JSON.stringify(gi)}`);
  assert.deepEqual(gi.children.map((x) => x.id), [grandkid.id]);
  assert.equal(gi.parent?.id, root.id, 'include.parent → parent: Agent');
  const gr = await observer.conn.getAgent(root.id, { include: { descendants: true } });
  assert.ok(Array.isArray(gr.descendants), 'include.descendants → descendants: Agent[]');
  assert.deepEqual(sorted(gr.descendants.map((x) => x.id)), sorted([kid.id, grandkid.id]));

  await rejectsWithCode(observer.conn.getAgent(uid('no-such-agent')), 2001, 'get unknown agent');
});

test('map/agents/update: state and metadata, via AgentConnection.updateState/updateMetadata', async () => {
  const a = await connectAgent(gw, { name: 'updater' });
  const busy = await a.conn.busy();
  assert.equal(busy.id, a.id);
  assert.equal(busy.state, 'busy');
  assert.equal(a.conn.state, 'busy', 'SDK reads result.agent.state');
  const idle = await a.conn.idle();
  assert.equal(idle.state, 'idle');
  const withMeta = await a.conn.updateMetadata({ team: 'red', n: 3 });
  assert.equal(withMeta.metadata?.team, 'red');
  assert.equal(withMeta.metadata?.n, 3);
  const custom = await a.conn.updateState('x-thinking');
  assert.equal(custom.state, 'x-thinking', 'custom x- states are accepted');
  const g = await observer.conn.getAgent(a.id);
  assert.equal(g.agent.state, 'x-thinking');
  assert.equal(g.agent.metadata?.team, 'red');
  await rejectsWithCode(a.conn.updateState('flying'), [-32602, 3001], 'unknown non-x- state');
  await rejectsWithCode(
    observer.conn.callExtension('map/agents/update', { agentId: uid('ghost'), state: 'busy' }),
    2001, 'update unknown agent');
});

test('stopped is terminal: after done() a state change is refused with 3001/3003', async () => {
  const a = await connectAgent(gw, { name: 'finisher' });
  await a.conn.done();
  assert.equal(a.conn.state, 'stopped');
  const g = await observer.conn.getAgent(a.id);
  assert.equal(g.agent.state, 'stopped');
  await rejectsWithCode(a.conn.updateState('busy'), [3001, 3003], 'leaving stopped');
});

test('map/agents/suspend, resume, stop via ClientConnection', async () => {
  const a = await connectAgent(gw, { name: 'controlled' });
  const s = await observer.conn.suspendAgent(a.id, 'maintenance');
  assert.equal(s.agent?.id, a.id, `suspend result is {agent}, got ${JSON.stringify(s)}`);
  assert.equal(s.agent.state, 'suspended');
  assert.equal((await observer.conn.getAgent(a.id)).agent.state, 'suspended');

  const r = await observer.conn.resumeAgent(a.id);
  assert.equal(r.agent?.id, a.id, `resume result is {agent}, got ${JSON.stringify(r)}`);
  assert.ok(['registered', 'active', 'idle', 'busy'].includes(r.agent.state), `resumed agent must leave suspended, got ${r.agent.state}`);
  assert.equal((await observer.conn.getAgent(a.id)).agent.state, r.agent.state);

  const st = await observer.conn.stopAgent(a.id, { reason: 'done' });
  assert.equal(st.agent?.id, a.id, `stop result is {agent}, got ${JSON.stringify(st)}`);
  assert.ok(['stopping', 'stopped'].includes(st.agent.state), `stopped agent state, got ${st.agent.state}`);
  assert.ok(['stopping', 'stopped'].includes((await observer.conn.getAgent(a.id)).agent.state));

  await rejectsWithCode(observer.conn.suspendAgent(uid('ghost')), 2001, 'suspend unknown');
  await rejectsWithCode(observer.conn.resumeAgent(uid('ghost')), 2001, 'resume unknown');
  await rejectsWithCode(observer.conn.stopAgent(uid('ghost')), 2001, 'stop unknown');
});

test('map/agents/spawn via AgentConnection.spawn → {agent} with parent = the spawning agent', async () => {
  const p = await connectAgent(gw, { name: 'spawner' });
  const role = uid('spawned-role');
  const r = await p.conn.spawn({ name: 'spawned', role });
  assert.equal(typeof r.agent?.id, 'string', `spawn result {agent}, got ${JSON.stringify(r)}`);
  assert.equal(r.agent.parent, p.id);
  assert.equal(r.agent.role, role);
  const kids = agentIds(await observer.conn.listAgents({ filter: { parent: p.id } }));
  assert.deepEqual(kids, [r.agent.id]);
  const g = await observer.conn.getAgent(r.agent.id);
  assert.equal(g.agent.name, 'spawned');
});

test('map/inject (steering, advertised) via ClientConnection.inject → {injected: true}; unknown agent → 2001', async () => {
  const a = await connectAgent(gw, { name: 'steered' });
  const r = await observer.conn.inject(a.id, { text: 'focus on tests' });
  assert.equal(r.injected, true, `inject result {injected}, got ${JSON.stringify(r)}`);
  await rejectsWithCode(observer.conn.inject(uid('ghost'), { text: 'x' }), 2001, 'inject into unknown agent');
});

test('map/structure/graph: nodes are agents, edges {from,to,type:"parent-child"}', async () => {
  const p = await connectAgent(gw, { name: 'graph-parent' });
  const c1 = await connectAgent(gw, { name: 'graph-c1', parent: p.id });
  const c2 = await connectAgent(gw, { name: 'graph-c2', parent: p.id });
  const g1 = await connectAgent(gw, { name: 'graph-g1', parent: c1.id });
  const loner = await connectAgent(gw, { name: 'graph-loner' });
  const graph = await observer.conn.getStructureGraph();
  assert.ok(Array.isArray(graph.nodes) && Array.isArray(graph.edges), `graph shape {nodes, edges}, got ${JSON.stringify(graph).slice(0, 300)}`);
  const nodeIds = graph.nodes.map((n) => n.id);
  for (const x of [p, c1, c2, g1, loner]) assert.ok(nodeIds.includes(x.id), `node ${x.id} missing`);
  const pc = graph.edges.filter((e) => e.type === 'parent-child');
  const has = (from, to) => pc.some((e) => e.from === from && e.to === to);
  assert.ok(has(p.id, c1.id), 'edge parent → c1');
  assert.ok(has(p.id, c2.id), 'edge parent → c2');
  assert.ok(has(c1.id, g1.id), 'edge c1 → g1');
  assert.ok(!pc.some((e) => e.from === loner.id || e.to === loner.id), 'loner has no parent-child edge');
  assert.ok(!has(p.id, g1.id), 'no edge skipping a generation');
});

test('scopes: create, get, list, join, members, leave, delete', async () => {
  const a = await connectAgent(gw, { name: 'scope-a' });
  const b = await connectAgent(gw, { name: 'scope-b' });
  const name = uid('team');
  const scope = await a.conn.createScope({ name, metadata: { k: 'v' } });
  assert.equal(typeof scope.id, 'string', `createScope reads result.scope, got ${JSON.stringify(scope)}`);
  assert.equal(scope.name, name);

  const got = await observer.conn.getScope(scope.id);
  assert.equal(got.id, scope.id, 'map/scopes/get → {scope}');
  assert.equal(got.name, name);
  const list = await observer.conn.listScopes();
  assert.ok(Array.isArray(list.scopes), 'map/scopes/list → {scopes}');
  assert.ok(list.scopes.some((s) => s.id === scope.id));

  const j = await a.conn.joinScope(scope.id);
  assert.equal(j.scope?.id, scope.id, `join result {scope, agent}, got ${JSON.stringify(j)}`);
  assert.equal(j.agent?.id, a.id);
  await b.conn.joinScope(scope.id);
  let m = await observer.conn.getScopeMembers(scope.id);
  assert.ok(Array.isArray(m.members), 'map/scopes/members → {members}');
  assert.deepEqual(sorted(m.members), sorted([a.id, b.id]), 'members are agent ids');

  const l = await a.conn.leaveScope(scope.id);
  assert.equal(l.scope?.id, scope.id, `leave result {scope, agent}, got ${JSON.stringify(l)}`);
  assert.equal(l.agent?.id, a.id);
  m = await observer.conn.getScopeMembers(scope.id);
  assert.deepEqual(m.members, [b.id]);

  const d = await a.conn.callExtension('map/scopes/delete', { scopeId: scope.id });
  assert.equal(d.scope?.id, scope.id, `delete result {scope}, got ${JSON.stringify(d)}`);
  await rejectsWithCode(observer.conn.getScope(scope.id), 2002, 'get deleted scope');
  await rejectsWithCode(b.conn.joinScope(scope.id), 2002, 'join deleted scope');
  await rejectsWithCode(observer.conn.getScopeMembers(scope.id), 2002, 'members of deleted scope');
  const list2 = await observer.conn.listScopes();
  assert.ok(!list2.scopes.some((s) => s.id === scope.id), 'deleted scope is not listed');
});

test('scopes: register with scopes:[…] joins them; unknown scope → 2002', async () => {
  const creator = await connectAgent(gw, { name: 'scope-creator' });
  const wanted = uid('chosen-scope');
  const scope = await creator.conn.createScope({ scopeId: wanted, name: 'chosen' });
  assert.equal(scope.id, wanted, 'map/scopes/create honours scopeId');
  const member = await connectAgent(gw, { name: 'scoped', scopes: [scope.id] });
  const m = await observer.conn.getScopeMembers(scope.id);
  assert.deepEqual(m.members, [member.id]);
  await rejectsWithCode(member.conn.joinScope(uid('nope-scope')), 2002, 'join unknown scope');
  await rejectsWithCode(observer.conn.getScope(uid('nope-scope')), 2002, 'get unknown scope');
});

test('map/agents/unregister → {agent}; the agent disappears; unknown → 2001', async () => {
  const raw = await rawParticipant(gw, { participantType: 'agent', register: { name: 'to-unregister' } });
  const id = raw.agent.id;
  assert.ok(agentIds(await observer.conn.listAgents()).includes(id));
  const r = await raw.call('map/agents/unregister', { agentId: id, reason: 'test' });
  assert.equal(r.agent?.id, id, `unregister result {agent}, got ${JSON.stringify(r)}`);
  assert.ok(!agentIds(await observer.conn.listAgents()).includes(id), 'unregistered agent is not listed');
  await rejectsWithCode(observer.conn.getAgent(id), 2001, 'get after unregister');
  const again = await raw.request('map/agents/unregister', { agentId: id });
  assert.ok(again.error, 'second unregister must fail');
  assert.equal(again.error.code, 2001);
});

test('AgentConnection.disconnect() unregisters the agent and ends the session', async () => {
  const a = await connectAgent(gw, { name: 'leaver' });
  const keep = await connectAgent(gw, { name: 'stayer' });
  assert.ok(agentIds(await observer.conn.listAgents()).includes(a.id));
  const token = await a.conn.disconnect('bye');
  assert.equal(typeof token, 'string', 'map/disconnect returns a resumeToken');
  assert.equal(a.conn.isConnected, false);
  const ids = agentIds(await observer.conn.listAgents());
  assert.ok(!ids.includes(a.id), 'agent is gone after AgentConnection.disconnect()');
  assert.ok(ids.includes(keep.id), 'other agents are untouched');
  await rejectsWithCode(keep.conn.send({ agent: a.id }, { marker: uid('m') }), 2001, 'send to disconnected agent');
});
