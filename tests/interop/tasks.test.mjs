// The tasks extension (plugins/tasks → plugins/dist/tasks.wasm) through the SDK's typed task
// methods (createTask, assignTask, updateTask, listTasks): the capability group each participant
// type sees, a task's way from created to completed with its events in order, the update rules
// (only given fields, assignee null, meta merged), list filters and cursor pages, the spec's
// errors 14000–14003 and -32602, and tasks surviving a kill -9 of the gateway.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { existsSync } from 'node:fs';
import { canPerformMethod } from '@multi-agent-protocol/sdk';
import { startGateway, connectAgent, connectClient, rejectsWithCode, sourceAgent, uid, WAIT_MS } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const TASKS_WASM = join(HERE, '..', '..', 'plugins', 'dist', 'tasks.wasm');
const extraToml = `[plugins.tasks]\npath = ${JSON.stringify(TASKS_WASM)}\n`;
const key = (k) => ({ method: 'api-key', credential: k });
const BOARD = key('board-key');
const LOCKED = key('locked-key');
const OFF = key('off-key');
const BARE = key('bare-key');
const TENANTS = [
  { id: 'default' },
  // A tenant of its own for the listing test, so other tests' tasks do not show.
  { id: 'board', api_keys: ['board-key'] },
  // Only clients create, and only registered agents take tasks.
  { id: 'locked', api_keys: ['locked-key'], toml: 'plugin_config = { tasks = { can_create = ["client"], registered_assignees = true } }' },
  { id: 'off', api_keys: ['off-key'], toml: 'plugin_config = { tasks = { enabled = false } }' },
  // No plugins at all: map/tasks/* is nobody's.
  { id: 'bare', api_keys: ['bare-key'], toml: 'plugins = []' },
];
const E = { NOT_ENABLED: 14000, NOT_FOUND: 14001, ASSIGNMENT_FAILED: 14002, DENIED: 14003, INVALID_PARAMS: -32602, NO_METHOD: -32601 };
const TASK_ID = /^task-[0-9A-HJKMNP-TV-Z]{26}$/;
const ALL_FLAGS = { enabled: true, canCreate: true, canAssign: true, canUpdate: true, canList: true };

let gw;
before(async () => {
  assert.ok(existsSync(TASKS_WASM), `${TASKS_WASM} is missing: run scripts/build-plugins.sh`);
  gw = await startGateway({ tenants: TENANTS, extraToml });
});
after(async () => { await gw?.stop(); });

/** A client subscribed to task.* events; `wait(n)` resolves with its first n events. */
async function watcher(auth) {
  const w = await connectClient(gw, { auth, name: uid('watch') });
  const sub = await w.conn.subscribe({ eventTypes: ['task.*'] });
  const wait = (n) => w.tap.waitForEvents(sub.id, () => true, n, WAIT_MS).then((ps) => ps.slice(0, n));
  return { w, sub, wait };
}

test('map/connect advertises urn:map:ext:tasks:1 with the flags of each participant type', async () => {
  const c = await connectClient(gw);
  const caps = c.connectResult.capabilities;
  assert.deepEqual(caps.tasks, ALL_FLAGS);
  assert.equal(canPerformMethod('map/tasks/create', caps), true, "the SDK's own check agrees");
  const ext = caps.extensions.find((e) => e.uri === 'urn:map:ext:tasks:1');
  assert.ok(ext, `extensions: ${JSON.stringify(caps.extensions)}`);
  assert.deepEqual([...ext.methods].sort(), ['map/tasks/assign', 'map/tasks/create', 'map/tasks/list', 'map/tasks/update']);
  const a = await connectAgent(gw, { name: uid('caps') });
  assert.deepEqual(a.connectResult.capabilities.tasks, ALL_FLAGS);
  const locked = await connectAgent(gw, { name: uid('caps'), auth: LOCKED });
  assert.deepEqual(locked.connectResult.capabilities.tasks, { ...ALL_FLAGS, canCreate: false });
  assert.equal(canPerformMethod('map/tasks/create', locked.connectResult.capabilities), false);
  const off = await connectClient(gw, { auth: OFF });
  assert.deepEqual(off.connectResult.capabilities.tasks, { enabled: false, canCreate: false, canAssign: false, canUpdate: false, canList: false });
});

test('a task goes from created through assigned to completed, and a subscriber hears each step in order', async () => {
  const { w, sub, wait } = await watcher();
  const boss = await connectClient(gw, { name: uid('boss') });
  const worker = await connectAgent(gw, { name: uid('worker') });

  const { task } = await boss.conn.createTask({ task: { title: 'Write the report', description: 'Q3', meta: { priority: 1 } } });
  assert.match(task.id, TASK_ID, 'an id is made when none is given');
  assert.deepEqual(task, { id: task.id, title: 'Write the report', description: 'Q3', meta: { priority: 1 } }, 'only given fields, no nulls');
  assert.deepEqual((await boss.conn.assignTask(task.id, worker.id)).task, { ...task, assignee: worker.id });
  const started = (await worker.conn.updateTask({ taskId: task.id, status: 'in_progress' })).task;
  assert.equal(started.status, 'in_progress');
  // No status change, no event: the next event is the completion.
  await worker.conn.updateTask({ taskId: task.id, title: 'Write the Q3 report', status: 'in_progress' });
  const done = (await worker.conn.updateTask({ taskId: task.id, status: 'completed', meta: { pages: 12 } })).task;
  assert.deepEqual(done, { id: task.id, assignee: worker.id, title: 'Write the Q3 report', description: 'Q3', status: 'completed', meta: { priority: 1, pages: 12 } });

  const events = await wait(5);
  assert.deepEqual(events.map((p) => p.event.type), ['task.created', 'task.assigned', 'task.status', 'task.status', 'task.completed']);
  assert.deepEqual(events.map((p) => p.event.data), [
    { task },
    { taskId: task.id, agentId: worker.id },
    { taskId: task.id, previous: 'open', current: 'in_progress' },
    { taskId: task.id, previous: 'in_progress', current: 'completed' },
    { taskId: task.id },
  ]);
  assert.deepEqual(events.map((p) => sourceAgent(p.event)), [boss.participantId, boss.participantId, worker.id, worker.id, worker.id]);
  const seq = events.map((p) => p.sequenceNumber);
  assert.deepEqual(seq, seq.map((_, i) => seq[0] + i), 'numbered without gaps');
  assert.equal(w.tap.events(sub.id).length, 5, 'nothing else was announced');
});

test('updates change only what they name: assignee null unassigns, meta merges; unregistered assignees are fine', async () => {
  const c = await connectClient(gw);
  const id = uid('given');
  const { task } = await c.conn.createTask({ task: { id, assignee: 'nobody-registered-this', status: 'blocked', meta: { a: 1, b: 2 } } });
  assert.deepEqual(task, { id, assignee: 'nobody-registered-this', status: 'blocked', meta: { a: 1, b: 2 } }, 'a given id is kept');
  const un = (await c.conn.updateTask({ taskId: id, assignee: null, meta: { b: 3, c: 4 } })).task;
  assert.deepEqual(un, { id, assignee: null, status: 'blocked', meta: { a: 1, b: 3, c: 4 } });
  const mine = await c.conn.listTasks({ filter: { assignee: 'nobody-registered-this' } });
  assert.ok(!mine.tasks.some((t) => t.id === id), 'unassigned tasks leave the assignee filter');
  // Flat params are accepted too.
  const flat = (await c.conn.callExtension('map/tasks/create', { title: 'flat', status: 'open' })).task;
  assert.deepEqual(flat, { id: flat.id, title: 'flat', status: 'open' });
  assert.equal((await c.conn.callExtension('map/tasks/assign', { taskId: flat.id, assignee: 'x' })).task.assignee, 'x');
});

test('concurrent updates of one task lose nothing, and concurrent creates of one id make one task', async () => {
  const clients = await Promise.all(Array.from({ length: 4 }, () => connectClient(gw)));
  const { task } = await clients[0].conn.createTask({ task: { title: uid('busy') } });
  await Promise.all(Array.from({ length: 20 }, (_, i) => clients[i % 4].conn.updateTask({ taskId: task.id, meta: { [`k${i}`]: i } })));
  const listed = (await clients[0].conn.listTasks({ limit: 1000 })).tasks.find((t) => t.id === task.id);
  assert.deepEqual(listed.meta, Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`k${i}`, i])), 'every merge kept');
  const id = uid('same');
  const results = await Promise.allSettled(clients.map((h) => h.conn.createTask({ task: { id } })));
  assert.deepEqual(results.map((r) => r.reason?.code ?? 'created').sort(), ['created', E.INVALID_PARAMS, E.INVALID_PARAMS, E.INVALID_PARAMS].sort());
});

test('list: creation order, assignee and status filters, cursor pages', async () => {
  const c = await connectClient(gw, { auth: BOARD });
  const [a, b] = [uid('agent-a'), uid('agent-b')];
  const plan = [[a, 'open'], [b, 'open'], [a, 'blocked'], [null, undefined], [a, 'open'], [b, 'completed'], [a, undefined]];
  const made = [];
  for (const [assignee, status] of plan) {
    const t = { title: `task ${made.length}` };
    if (assignee) t.assignee = assignee;
    if (status) t.status = status;
    made.push((await c.conn.createTask({ task: t })).task);
  }
  const all = await c.conn.listTasks();
  assert.deepEqual(all, { tasks: made, hasMore: false }, 'every task, in creation order, no nextCursor');

  const pages = [];
  let cursor;
  for (;;) {
    const page = await c.conn.listTasks({ limit: 3, cursor });
    pages.push(page.tasks.map((t) => t.title));
    assert.equal(page.hasMore, 'nextCursor' in page, 'nextCursor only with hasMore');
    if (!page.hasMore) break;
    cursor = page.nextCursor;
  }
  assert.deepEqual(pages, [['task 0', 'task 1', 'task 2'], ['task 3', 'task 4', 'task 5'], ['task 6']]);

  const titles = async (params) => (await c.conn.listTasks(params)).tasks.map((t) => t.title);
  assert.deepEqual(await titles({ filter: { assignee: a } }), ['task 0', 'task 2', 'task 4', 'task 6']);
  assert.deepEqual(await titles({ filter: { status: 'open' } }), ['task 0', 'task 1', 'task 4'], 'status-less tasks never match');
  assert.deepEqual(await titles({ filter: { status: ['blocked', 'completed'] } }), ['task 2', 'task 5']);
  assert.deepEqual(await titles({ filter: { assignee: a, status: 'open' } }), ['task 0', 'task 4']);
  const first = await c.conn.listTasks({ filter: { assignee: a }, limit: 2 });
  assert.deepEqual([first.tasks.map((t) => t.title), first.hasMore], [['task 0', 'task 2'], true]);
  const rest = await c.conn.listTasks({ filter: { assignee: a }, limit: 2, cursor: first.nextCursor });
  assert.deepEqual(rest, { tasks: [made[4], made[6]], hasMore: false });
  assert.deepEqual(await c.conn.listTasks({ filter: { assignee: 'no-such-agent' } }), { tasks: [], hasMore: false });
  // A reassignment moves the task between assignee filters.
  await c.conn.assignTask(made[0].id, b);
  assert.deepEqual(await titles({ filter: { assignee: b } }), ['task 0', 'task 1', 'task 5']);
  // Tenants do not share tasks.
  assert.ok(!(await (await connectClient(gw)).conn.listTasks()).tasks.some((t) => t.id === made[0].id));
});

test('errors: 14001 unknown task, -32602 bad params, 14000 off, -32601 where no plugin serves map/tasks/', async () => {
  const c = await connectClient(gw);
  await rejectsWithCode(c.conn.assignTask('task-none', 'x'), E.NOT_FOUND, 'assign an unknown task');
  await rejectsWithCode(c.conn.updateTask({ taskId: 'task-none', status: 'open' }), E.NOT_FOUND, 'update an unknown task');
  await rejectsWithCode(c.conn.createTask({ task: { status: 'done' } }), E.INVALID_PARAMS, 'unknown status');
  await rejectsWithCode(c.conn.createTask({ task: { title: 'x', priority: 1 } }), E.INVALID_PARAMS, 'unknown field');
  const { task } = await c.conn.createTask({ task: { id: uid('dup') } });
  await rejectsWithCode(c.conn.createTask({ task: { id: task.id } }), E.INVALID_PARAMS, 'a taken id');
  await rejectsWithCode(c.conn.assignTask(task.id, undefined), E.INVALID_PARAMS, 'no agentId');
  await rejectsWithCode(c.conn.updateTask({ taskId: task.id, meta: 'x' }), E.INVALID_PARAMS, 'meta not an object');
  await rejectsWithCode(c.conn.listTasks({ limit: 0 }), E.INVALID_PARAMS, 'limit 0');
  await rejectsWithCode(c.conn.listTasks({ cursor: 'not-a-cursor' }), E.INVALID_PARAMS, 'bad cursor');
  await rejectsWithCode(c.conn.callExtension('map/tasks/delete', { taskId: task.id }), E.NO_METHOD, 'no such method');
  const off = await connectClient(gw, { auth: OFF });
  await rejectsWithCode(off.conn.listTasks(), E.NOT_ENABLED, 'tasks off for the tenant');
  const bare = await connectClient(gw, { auth: BARE });
  await rejectsWithCode(bare.conn.createTask({ task: {} }), E.NO_METHOD, 'no tasks plugin in the tenant');
  await rejectsWithCode(bare.conn.callExtension('map/resources/list', {}), E.NO_METHOD, 'map/resources/ is nobody');
});

test('14003 and 14002: what the tenant does not grant, what a participant gave up, other agents\' tasks, unregistered assignees', async () => {
  const boss = await connectClient(gw);
  const [mine, other] = [await connectAgent(gw, { name: uid('mine') }), await connectAgent(gw, { name: uid('other') })];
  const { task } = await boss.conn.createTask({ task: { title: 'for mine' } });
  await boss.conn.assignTask(task.id, mine.id);
  await rejectsWithCode(other.conn.updateTask({ taskId: task.id, status: 'failed' }), E.DENIED, "another agent's task");
  assert.equal((await mine.conn.updateTask({ taskId: task.id, status: 'failed' })).task.status, 'failed');
  const own = (await other.conn.createTask({ task: { title: 'by other' } })).task;
  assert.equal((await other.conn.updateTask({ taskId: own.id, status: 'blocked' })).task.status, 'blocked', 'its own creation');
  assert.equal((await boss.conn.updateTask({ taskId: own.id, status: 'open' })).task.status, 'open', 'clients update any task');
  const shy = await connectClient(gw, { capabilities: { tasks: { canList: false } } });
  await rejectsWithCode(shy.conn.listTasks(), E.DENIED, 'declared canList: false');

  const lockedAgent = await connectAgent(gw, { name: uid('locked'), auth: LOCKED });
  await rejectsWithCode(lockedAgent.conn.createTask({ task: { title: 'x' } }), E.DENIED, 'agents may not create there');
  const lockedBoss = await connectClient(gw, { auth: LOCKED });
  const locked = (await lockedBoss.conn.createTask({ task: { title: 'locked' } })).task;
  await rejectsWithCode(lockedBoss.conn.assignTask(locked.id, 'ghost'), E.ASSIGNMENT_FAILED, 'an unregistered agent');
  await rejectsWithCode(lockedBoss.conn.updateTask({ taskId: locked.id, assignee: 'ghost' }), E.ASSIGNMENT_FAILED, 'through update');
  assert.equal((await lockedBoss.conn.assignTask(locked.id, lockedAgent.id)).task.assignee, lockedAgent.id);
});

test('where the tenant runs the UAP hub, its jobs follow the tasks in the list, read-only, with the job under meta.uap', async () => {
  const UAP_WASM = join(HERE, '..', '..', 'plugins', 'dist', 'uap.wasm');
  const both = await startGateway({
    tenants: [{ id: 'default' }, { id: 'nojobs', api_keys: ['nojobs-key'], toml: 'plugin_config = { tasks = { show_uap_jobs = false } }' }],
    extraToml: `${extraToml}[plugins.uap]\npath = ${JSON.stringify(UAP_WASM)}\nmode = "singleton"\n`,
  });
  try {
    const c = await connectClient(both);
    const own = (await c.conn.createTask({ task: { title: 'ours', status: 'open' } })).task;
    const { job } = await c.conn.callExtension('uap/submit', { kind: 'test', type: 'as-a-task' });
    const all = await c.conn.listTasks();
    assert.deepEqual(all.tasks.map((t) => t.id), [own.id, `uap:${job.id}`], JSON.stringify(all));
    assert.equal(all.hasMore, false);
    const shown = all.tasks[1];
    assert.equal(shown.status, 'open', 'a queued job is an open task');
    assert.deepEqual([shown.meta.uap.id, shown.meta.uap.status, shown.meta.uap.type], [job.id, 'queued', 'as-a-task']);

    // Pages go on from the tasks into the jobs with cursors of their own.
    const first = await c.conn.listTasks({ limit: 1 });
    assert.deepEqual([first.tasks.map((t) => t.id), first.hasMore], [[own.id], true]);
    const second = await c.conn.listTasks({ limit: 1, cursor: first.nextCursor });
    assert.deepEqual(second, { tasks: [shown], hasMore: false });
    // Filters apply to jobs as to tasks.
    assert.deepEqual((await c.conn.listTasks({ filter: { status: 'completed' } })).tasks, []);
    assert.deepEqual((await c.conn.listTasks({ filter: { status: 'open' } })).tasks.map((t) => t.id), [own.id, shown.id]);

    // Read-only: the hub changes jobs; the uap: prefix is not for the tenant's own tasks.
    await rejectsWithCode(c.conn.updateTask({ taskId: shown.id, status: 'completed' }), E.DENIED);
    await rejectsWithCode(c.conn.assignTask(shown.id, 'someone'), E.DENIED);
    await rejectsWithCode(c.conn.createTask({ task: { id: 'uap:mine' } }), E.INVALID_PARAMS);

    // A tenant may leave them out.
    const quiet = await connectClient(both, { auth: key('nojobs-key') });
    await quiet.conn.callExtension('uap/submit', { kind: 'test', type: 'hidden' });
    assert.deepEqual(await quiet.conn.listTasks(), { tasks: [], hasMore: false });
  } finally {
    await both.stop();
  }
});

test('tasks survive a kill -9 of the gateway, and their cursors still page', async () => {
  const first = await startGateway({ extraToml });
  let second;
  try {
    const c = await connectClient(first);
    const worker = uid('worker');
    for (let i = 0; i < 5; i++) {
      await c.conn.createTask({ task: { title: `durable ${i}`, assignee: i % 2 ? worker : undefined, status: i < 3 ? 'open' : 'in_progress' } });
    }
    const all = await c.conn.listTasks();
    await c.conn.updateTask({ taskId: all.tasks[1].id, status: 'completed', meta: { done: true } });
    const before = await c.conn.listTasks();
    const page1 = await c.conn.listTasks({ limit: 2 });
    await first.kill();

    second = await startGateway({ extraToml, dataDir: first.dataDir });
    const c2 = await connectClient(second);
    assert.deepEqual(await c2.conn.listTasks(), before, 'every task, as it was, in creation order');
    assert.deepEqual((await c2.conn.listTasks({ filter: { assignee: worker } })).tasks, before.tasks.filter((t) => t.assignee === worker), 'the assignee index');
    const page2 = await c2.conn.listTasks({ limit: 2, cursor: page1.nextCursor });
    assert.deepEqual(page2.tasks, before.tasks.slice(2, 4), 'a cursor from before the restart');
    const later = (await c2.conn.updateTask({ taskId: before.tasks[0].id, status: 'blocked' })).task;
    assert.equal(later.status, 'blocked', 'writes carry on');
  } finally {
    await second?.stop();
    await first.stop();
  }
});
