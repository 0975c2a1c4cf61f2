"""A2A agents on the official SDK's server side (a2a-sdk), the peers of
the A2A bridge's outbound tests (tests/interop/a2a-outbound.test.mjs).

    server.py --bearer TOKEN [--card-key ed25519-secret:SEED]

Listens on a free port of 127.0.0.1 and prints JSON lines on stdout: first
{"ready": "http://127.0.0.1:PORT"}, then one line per HTTP request
({"http", "path", "a2aVersion", "authorized"}) and per A2A call the agents
serve ({"rpc", ...}).

- /secure: an agent that wants "Authorization: Bearer TOKEN" for its card
  and its JSON-RPC URL (401 without it);
- /public: the same agent, open to all;
- /signed: the same agent, open to all, its card signed (the SDK's signer,
  EdDSA) with the --card-key;
- /grpc-only/.well-known/agent-card.json: a card with no JSON-RPC interface;
- /junk/.well-known/agent-card.json: JSON that is not a card.

What the agent does depends on the message's text:
- "hello": answers with a Message ("hello back"), opening no task;
- "report …": a task going submitted → working ("on it") → artifact a1
  ("summary") → completed ("done");
- "fail": a task going submitted → failed ("cannot do that");
- "ask": a task waiting in input-required ("which one?"); the next message
  of the task completes it ("ok: " + its text);
- "hold": a task that stays working.
A task takes its next step only once a GetTask has shown its current one,
so a client that polls sees every step, whatever the timing.
"""

import argparse
import asyncio
import base64
import json
import socket
import uuid

import uvicorn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from a2a.server.agent_execution import AgentExecutor
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, Message, Part, Role, Task, TaskState, TaskStatus
from a2a.utils.signing import create_agent_card_signer


def out(obj):
    print(json.dumps(obj), flush=True)


class Shown:
    """The task each GetTask answered last, for the agent to wait on."""

    def __init__(self):
        self.cond = asyncio.Condition()
        self.tasks = {}

    async def record(self, task):
        async with self.cond:
            self.tasks[task.id] = task
            self.cond.notify_all()

    async def until(self, task_id, pred):
        async with self.cond:
            await asyncio.wait_for(self.cond.wait_for(lambda: task_id in self.tasks and pred(self.tasks[task_id])), 60)


SHOWN = Shown()


def state_is(state):
    return lambda t: t.status.state == state


class Agent(AgentExecutor):
    async def execute(self, context, queue):
        text = context.get_user_input()
        if text == 'hello' and context.current_task is None:
            await queue.enqueue_event(Message(message_id=str(uuid.uuid4()), role=Role.ROLE_AGENT, context_id=context.context_id, parts=[Part(text='hello back')]))
            return
        task = context.current_task
        if task is None:
            task = Task(id=context.task_id, context_id=context.context_id, status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED), history=[context.message])
            await queue.enqueue_event(task)
        updater = TaskUpdater(queue, task.id, task.context_id)

        def say(t):
            return updater.new_agent_message([Part(text=t)])

        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await updater.complete(say(f'ok: {text}'))
        elif text.startswith('report'):
            await SHOWN.until(task.id, state_is(TaskState.TASK_STATE_SUBMITTED))
            await updater.start_work(say('on it'))
            await SHOWN.until(task.id, state_is(TaskState.TASK_STATE_WORKING))
            await updater.add_artifact([Part(text='line 1')], artifact_id='a1', name='summary')
            await SHOWN.until(task.id, lambda t: len(t.artifacts) == 1)
            await updater.complete(say('done'))
        elif text == 'fail':
            await SHOWN.until(task.id, state_is(TaskState.TASK_STATE_SUBMITTED))
            await updater.failed(say('cannot do that'))
        elif text == 'ask':
            await updater.requires_input(say('which one?'))
        elif text == 'hold':
            await updater.start_work()
            await asyncio.Event().wait()
        else:
            await updater.complete(say(f'echo: {text}'))

    async def cancel(self, context, queue):
        await TaskUpdater(queue, context.task_id, context.context_id).cancel()


class Handler(DefaultRequestHandlerV2):
    async def on_message_send(self, params, context):
        m = params.message
        out({'rpc': 'SendMessage', 'text': m.parts[0].text if m.parts else None, 'taskId': m.task_id or None, 'returnImmediately': params.configuration.return_immediately})
        return await super().on_message_send(params, context)

    async def on_get_task(self, params, context):
        out({'rpc': 'GetTask', 'id': params.id})
        task = await super().on_get_task(params, context)
        if task is not None:
            await SHOWN.record(task)
        return task


def agent_routes(base, url, signer=None):
    card = AgentCard(
        name=f'Reporter ({base.strip("/")})',
        description='Writes reports',
        version='1.0.0',
        supported_interfaces=[AgentInterface(url=url, protocol_binding='JSONRPC', protocol_version='1.0')],
        capabilities=AgentCapabilities(streaming=False, push_notifications=False),
        default_input_modes=['text/plain'],
        default_output_modes=['text/plain'],
        skills=[AgentSkill(id='report', name='Reports', description='Writes a report', tags=['writing'])],
    )
    handler = Handler(agent_executor=Agent(), task_store=InMemoryTaskStore(), agent_card=card)
    async def signed(c):
        # A copy: the signer adds its signature to the card it is given.
        fresh = AgentCard()
        fresh.CopyFrom(c)
        return signer(fresh)

    card_routes = create_agent_card_routes(card, card_modifier=signed if signer else None, card_url=f'{base}/.well-known/agent-card.json')
    return card_routes + create_jsonrpc_routes(handler, rpc_url=base)


class Gate:
    """Logs each request; /secure wants the bearer token."""

    def __init__(self, app, bearer):
        self.app = app
        self.bearer = bearer

    async def __call__(self, scope, receive, send):
        if scope['type'] == 'http':
            headers = {k.decode('latin-1').lower(): v.decode('latin-1') for k, v in scope['headers']}
            authorized = headers.get('authorization') == f'Bearer {self.bearer}'
            out({'http': scope['method'], 'path': scope['path'], 'a2aVersion': headers.get('a2a-version'), 'authorized': authorized})
            if scope['path'].startswith('/secure') and not authorized:
                await JSONResponse({'error': 'a bearer token is required'}, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--bearer', required=True)
    ap.add_argument('--card-key', help='ed25519-secret:<base64 seed> that signs /signed\'s card')
    a = ap.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(('127.0.0.1', 0))
    # Listening before the ready line: a connection made at once waits in the backlog.
    sock.listen(64)
    base = f'http://127.0.0.1:{sock.getsockname()[1]}'

    async def grpc_only(_request):
        return JSONResponse({'name': 'gRPC only', 'supportedInterfaces': [{'url': f'{base}/grpc', 'protocolBinding': 'GRPC', 'protocolVersion': '1.0'}]})

    async def junk(_request):
        return JSONResponse({'name': 42, 'supportedInterfaces': 'everywhere'})

    routes = agent_routes('/secure', f'{base}/secure') + agent_routes('/public', f'{base}/public')
    if a.card_key:
        key = Ed25519PrivateKey.from_private_bytes(base64.b64decode(a.card_key.removeprefix('ed25519-secret:')))
        signer = create_agent_card_signer(key, {'alg': 'EdDSA', 'typ': 'JOSE', 'kid': 'test-key'})
        routes += agent_routes('/signed', f'{base}/signed', signer)
    routes += [Route('/grpc-only/.well-known/agent-card.json', grpc_only), Route('/junk/.well-known/agent-card.json', junk)]
    app = Gate(Starlette(routes=routes), a.bearer)
    server = uvicorn.Server(uvicorn.Config(app, log_level='warning', lifespan='off'))
    out({'ready': base})
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == '__main__':
    main()
