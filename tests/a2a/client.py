"""An A2A client on the official SDK (a2a-sdk), driven one step at a time
by tests/interop/a2a.test.mjs: each run does one thing and prints what it
got as JSON lines (the SDK's protobuf messages as JSON).

    client.py BASE KEY AGENT card [--v03-card] [--verify ed25519:PUBLIC-KEY]
    client.py BASE KEY AGENT send TEXT [--stream] [--task ID] [--context ID] [--immediate]
    client.py BASE KEY AGENT get TASK | cancel TASK | subscribe TASK
    client.py BASE KEY AGENT list [--size N] [--token T] [--context ID] [--state S]
    client.py BASE KEY AGENT push-set TASK --push URL [--push-id ID] [--push-token T] [--push-auth SCHEME:CREDENTIALS]
    client.py BASE KEY AGENT push-get TASK --push-id ID | push-delete TASK --push-id ID
    client.py BASE KEY AGENT push-list TASK [--size N] [--token T]
    (send takes --push URL [--push-token T] [--push-auth ...] too: a config for the new task)

With --v03 the client uses only the card's 0.3 interface (the SDK's 0.3 transport),
with --binding B only the card's interfaces of binding B (JSONRPC, HTTP+JSON).
With --v03-card the card is read as an A2A 0.3 client reads it: by its 0.3
fields alone (the SDK's 0.3 model, then its conversion to 1.0). With --verify
the card's signatures are checked by the SDK's verifier (EdDSA) against the
key: {"verified": true}, or the SDK's error.
"""

import argparse
import asyncio
import base64
import json
import uuid

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from google.protobuf import json_format

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.compat.v0_3.conversions import to_core_agent_card
from a2a.compat.v0_3.types import AgentCard as AgentCardV03
from a2a.types import (
    AuthenticationInfo,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SendMessageConfiguration,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import A2AError
from a2a.utils.signing import create_signature_verifier


def out(obj):
    if not isinstance(obj, dict):
        obj = json_format.MessageToDict(obj)
    print(json.dumps(obj), flush=True)


def push_config(a, task=""):
    c = TaskPushNotificationConfig(url=a.push, task_id=task)
    if a.push_id:
        c.id = a.push_id
    if a.push_token:
        c.token = a.push_token
    if a.push_auth:
        scheme, _, cred = a.push_auth.partition(":")
        c.authentication.CopyFrom(AuthenticationInfo(scheme=scheme, credentials=cred))
    return c


async def run(a):
    url = f"{a.base}/agents/{a.agent}"
    async with httpx.AsyncClient(headers={"x-api-key": a.key}, timeout=60) as http:
        if a.v03_card:
            res = await http.get(f"{url}/.well-known/agent-card.json")
            res.raise_for_status()
            data = {k: v for k, v in res.json().items() if k != "supportedInterfaces"}
            out(to_core_agent_card(AgentCardV03.model_validate(data)))
            return
        card = await A2ACardResolver(http, url).get_agent_card()
        if a.cmd == "card":
            if a.verify:
                key = Ed25519PublicKey.from_public_bytes(base64.b64decode(a.verify.removeprefix("ed25519:")))
                create_signature_verifier(lambda _kid, _jku: key, ["EdDSA"])(card)
                out({"verified": True, "signatures": len(card.signatures)})
                return
            out(card)
            return
        if a.v03 or a.binding:
            # Only the 0.3 interface (the SDK then speaks 0.3, its compat transport), or only one binding's.
            keep = [i for i in card.supported_interfaces if (i.protocol_version == "0.3" if a.v03 else i.protocol_binding == a.binding)]
            del card.supported_interfaces[:]
            card.supported_interfaces.extend(keep)
        config = ClientConfig(httpx_client=http, streaming=a.stream or a.cmd == "subscribe", polling=a.immediate)
        if a.binding:
            config.supported_protocol_bindings = [a.binding]
        client = ClientFactory(config).create(card)
        if a.cmd == "send":
            msg = Message(message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=a.arg)])
            if a.task:
                msg.task_id = a.task
            if a.context:
                msg.context_id = a.context
            req = SendMessageRequest(message=msg)
            if a.push:
                req.configuration.CopyFrom(SendMessageConfiguration(task_push_notification_config=push_config(a)))
            async for event in client.send_message(req):
                out(event)
        elif a.cmd == "get":
            out(await client.get_task(GetTaskRequest(id=a.arg)))
        elif a.cmd == "cancel":
            out(await client.cancel_task(CancelTaskRequest(id=a.arg)))
        elif a.cmd == "subscribe":
            async for event in client.subscribe(SubscribeToTaskRequest(id=a.arg)):
                out(event)
        elif a.cmd == "list":
            req = ListTasksRequest(page_size=a.size, page_token=a.token or "")
            if a.context:
                req.context_id = a.context
            if a.state:
                req.status = TaskState.Value(a.state)
            out(await client.list_tasks(req))
        elif a.cmd == "push-set":
            out(await client.create_task_push_notification_config(push_config(a, a.arg)))
        elif a.cmd == "push-get":
            out(await client.get_task_push_notification_config(GetTaskPushNotificationConfigRequest(task_id=a.arg, id=a.push_id)))
        elif a.cmd == "push-list":
            out(await client.list_task_push_notification_configs(ListTaskPushNotificationConfigsRequest(task_id=a.arg, page_size=a.size, page_token=a.token or "")))
        elif a.cmd == "push-delete":
            await client.delete_task_push_notification_config(DeleteTaskPushNotificationConfigRequest(task_id=a.arg, id=a.push_id))
            out({"deleted": a.push_id})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("base")
    p.add_argument("key")
    p.add_argument("agent")
    p.add_argument("cmd", choices=["card", "send", "get", "cancel", "subscribe", "list", "push-set", "push-get", "push-list", "push-delete"])
    p.add_argument("arg", nargs="?")
    p.add_argument("--stream", action="store_true")
    p.add_argument("--immediate", action="store_true")
    p.add_argument("--v03", action="store_true", help="speak A2A 0.3")
    p.add_argument("--v03-card", action="store_true", help="read the card by its 0.3 fields")
    p.add_argument("--binding", help="use only the card's interfaces of this protocol binding")
    p.add_argument("--verify", help="check the card's signature with this ed25519: public key")
    p.add_argument("--task")
    p.add_argument("--context")
    p.add_argument("--size", type=int, default=0)
    p.add_argument("--token")
    p.add_argument("--state")
    p.add_argument("--push")
    p.add_argument("--push-id")
    p.add_argument("--push-token")
    p.add_argument("--push-auth")
    a = p.parse_args()
    try:
        asyncio.run(run(a))
    except A2AError as e:
        out({"error": type(e).__name__, "message": str(e)})
    except Exception as e:  # the SDK's client errors (HTTP status, parse failures)
        out({"error": type(e).__name__, "message": str(e)})


if __name__ == "__main__":
    main()
