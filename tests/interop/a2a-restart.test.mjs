// A2A tasks live in the host's durable plugin storage: after a kill -9 (no
// shutdown, no flush) and a restart on the same data dir, every task the
// bridge acknowledged is there as it was, and one still open goes on.
// The client is the official A2A SDK for Python (tests/a2a/client.py).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { existsSync } from 'node:fs';
import { startGateway, connectAgent, pollUntil, DEFAULT_TENANTS } from './harness.mjs';
import { DIST, ACME, runClient } from './a2a-sdk.mjs';

const WASM = join(DIST, 'a2a.wasm');

function a2a(gw, [agent, ...args]) {
  return runClient(`${gw.baseUrl}/a2a`, 'acme-key', agent, args);
}

/** The agent: `report` completes with an artifact, anything else stays working. */
async function agent(gw, seen) {
  const helper = await connectAgent(gw, { name: 'Helper', agentId: 'helper', auth: ACME });
  await helper.conn.updateMetadata({ a2a: { skills: [{ id: 'report', name: 'Reports' }] } });
  helper.conn.onMessage((m) => { handle(m).catch((e) => seen.push({ error: String(e) })); });
  async function handle(m) {
    const a = m.payload?.a2a;
    if (!a) return;
    seen.push(a);
    if (a.method !== 'SendMessage') return;
    const call = (params) => helper.conn.callExtension('a2a/task/update', { taskId: a.taskId, ...params });
    if (a.message.parts[0].text === 'report') {
      await call({ artifacts: [{ artifactId: 'a1', parts: [{ text: 'kept' }] }] });
      await call({ state: 'completed' });
    } else {
      await call({ state: 'working' });
    }
  }
  return helper;
}

test('kill -9 after acknowledged sends loses no task, update or artifact', async () => {
  assert.ok(existsSync(WASM), `${WASM} is missing: run scripts/build-plugins.sh`);
  const opts = {
    tenants: [{ id: 'default' }, { ...DEFAULT_TENANTS.find((t) => t.id === 'acme'), toml: 'plugins = ["a2a"]' }],
    extraToml: `[plugins.a2a]\npath = ${JSON.stringify(WASM)}\nhttp_prefix = "/a2a"\ndeadline_ms = 20000\n[plugins.a2a.config]\nblockingWaitMs = 15000\nstreamWindowMs = 5000`,
  };
  const gw1 = await startGateway(opts);
  let gw2;
  try {
    const seen = [];
    await agent(gw1, seen);
    const [done] = await a2a(gw1, ['helper', 'send', 'report']);
    assert.deepEqual(seen.filter((s) => s.error), [], 'the agent calls succeed');
    assert.equal(done.task.status.state, 'TASK_STATE_COMPLETED');
    const [open] = await a2a(gw1, ['helper', 'send', 'hold', '--immediate']);
    await pollUntil(() => a2a(gw1, ['helper', 'get', open.task.id]), ([t]) => t.status.state === 'TASK_STATE_WORKING', { what: 'the open task working' });
    const [before] = await a2a(gw1, ['helper', 'list']);
    await gw1.kill();

    gw2 = await startGateway({ ...opts, dataDir: gw1.dataDir });
    const seen2 = [];
    await agent(gw2, seen2);
    const [after] = await a2a(gw2, ['helper', 'list']);
    assert.deepEqual(after, before, 'every task as it was, in the same order');
    const [kept] = await a2a(gw2, ['helper', 'get', done.task.id]);
    assert.deepEqual(kept.artifacts, [{ artifactId: 'a1', parts: [{ text: 'kept' }] }]);
    // The open task goes on: the client cancels it and the agent hears of it.
    const [canceled] = await a2a(gw2, ['helper', 'cancel', open.task.id]);
    assert.equal(canceled.status.state, 'TASK_STATE_CANCELED');
    await pollUntil(() => seen2, (s) => s.some((a) => a.method === 'CancelTask' && a.taskId === open.task.id), { what: 'the cancel notice' });
    // New tasks do not collide with the old ones.
    const [fresh] = await a2a(gw2, ['helper', 'send', 'report']);
    assert.notEqual(fresh.task.id, done.task.id);
    assert.equal((await a2a(gw2, ['helper', 'list']))[0].totalSize, 3);
  } finally {
    await gw1.stop();
    await gw2?.stop();
  }
});
