"""gRPC client checks against a running gateway serving the `stateful` fixture.

Stubs are generated from echo.proto at start (grpc_tools.protoc), so the
client is what any Python gRPC user would write. Usage:

    python echo_client.py HOST:PORT API_KEY CONFIG_PATH

CONFIG_PATH is the gateway's config file: the last check edits the plugin's
config there and reloads, to see open streams end with UNAVAILABLE.
Exits non-zero on the first failed check.
"""

import http.client
import importlib
import json
import os
import queue
import sys
import tempfile
import time

import grpc
from grpc_tools import protoc

from grpc_checks import expect_error

HERE = os.path.dirname(os.path.abspath(__file__))


def stubs():
    out = tempfile.mkdtemp(prefix="echo-stubs-")
    code = protoc.main(["protoc", f"-I{HERE}", f"--python_out={out}", f"--grpc_python_out={out}", os.path.join(HERE, "echo.proto")])
    assert code == 0, f"protoc failed with {code}"
    sys.path.insert(0, out)
    return importlib.import_module("echo_pb2"), importlib.import_module("echo_pb2_grpc")


def rpc_raw(addr, api_key, method, params):
    """A JSON-RPC call over HTTP POST /map/rpc (map/connect first): the whole answer."""
    conn = http.client.HTTPConnection(addr, timeout=10)
    headers = {"content-type": "application/json", "x-api-key": api_key}
    def post(body, session=None):
        h = dict(headers)
        if session:
            h["map-session-id"] = session
        conn.request("POST", "/map/rpc", json.dumps(body), h)
        resp = conn.getresponse()
        return resp, json.loads(resp.read())
    resp, connected = post({"jsonrpc": "2.0", "id": 1, "method": "map/connect", "params": {"protocolVersion": 1, "participant": {"type": "client"}}})
    session = resp.getheader("map-session-id")
    _, answer = post({"jsonrpc": "2.0", "id": 2, "method": method, "params": params}, session)
    return answer


def rpc(addr, api_key, method, params):
    answer = rpc_raw(addr, api_key, method, params)
    assert "result" in answer, answer
    return answer["result"]


def main():
    addr, api_key, config_path = sys.argv[1], sys.argv[2], sys.argv[3]
    pb, pb_grpc = stubs()
    creds = [("x-api-key", api_key)]
    channel = grpc.insecure_channel(addr)
    echo = pb_grpc.EchoStub(channel)
    Msg = pb.Msg

    # Each stream kind.
    assert echo.Unary(Msg(text="hi"), metadata=creds, timeout=10).text == "hi"
    assert echo.Callbacks(Msg(text="cb"), metadata=creds, timeout=10).text == "cb"
    assert [m.text for m in echo.ServerStream(Msg(text="s"), metadata=creds, timeout=10)] == ["s-1", "s-2", "s-3"]
    assert echo.ClientStream(iter([Msg(text=t) for t in "abc"]), metadata=creds, timeout=10).text == "a+b+c"
    assert [m.text for m in echo.Bidi(iter([Msg(text=t) for t in "xyz"]), metadata=creds, timeout=10)] == ["x", "y", "z"]
    # A streamed response that ends at once with OK and no message.
    assert list(echo.Empty(Msg(text="e"), metadata=creds, timeout=10)) == []
    print("stream kinds: ok")

    # Every call that opened was closed on the plugin's side; `Unary`, which
    # grpc-unary answers, ran one callback and never opened.
    deadline = time.monotonic() + 5
    while True:
        state = rpc(addr, api_key, "state/grpc", {})
        if state["open"] == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert state["open"] == 0 and state["closed"] == 5 and state["unary"] == 1, state
    print("closed callbacks: ok", state)

    # Unary methods answered in one callback: its error status, a trap, no
    # grpc-stream writes to the call, exactly one request message, and a
    # response over max_message_bytes.
    expect_error(grpc.StatusCode.FAILED_PRECONDITION, lambda: echo.Refuse(Msg(text="x"), metadata=creds, timeout=10), "refused in one callback")
    expect_error(grpc.StatusCode.INTERNAL, lambda: echo.Trap(Msg(text="x"), metadata=creds, timeout=10), "trapped")
    assert "not open" in echo.Sneak(Msg(text="x"), metadata=creds, timeout=10).text
    as_stream = channel.stream_unary("/echo.v1.Echo/Unary", request_serializer=None, response_deserializer=None)
    two = [Msg(text=t).SerializeToString() for t in "ab"]
    expect_error(grpc.StatusCode.INTERNAL, lambda: as_stream(iter(two), metadata=creds, timeout=10), "the client sent more")
    expect_error(grpc.StatusCode.INTERNAL, lambda: as_stream(iter([]), metadata=creds, timeout=10), "the client sent none")
    assert echo.Double(Msg(text="d"), metadata=creds, timeout=10).text == "dd"
    expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, lambda: echo.Double(Msg(text="d" * 600_000), metadata=creds, timeout=10), "the limit is")
    before = rpc(addr, api_key, "state/grpc", {})
    assert before["unary"] >= 1 and before["open"] == 0, before
    print("unary in one callback: ok", before)


    # Status codes: a path no plugin serves, a refusal, a plugin failure, bad credentials.
    unknown = channel.unary_unary("/echo.v1.Echo/Nope", request_serializer=None, response_deserializer=None)
    expect_error(grpc.StatusCode.UNIMPLEMENTED, lambda: unknown(b"", metadata=creds, timeout=10))
    other = channel.unary_unary("/other.v1.Service/Call", request_serializer=None, response_deserializer=None)
    expect_error(grpc.StatusCode.UNIMPLEMENTED, lambda: other(b"", metadata=creds, timeout=10))
    expect_error(grpc.StatusCode.FAILED_PRECONDITION, lambda: echo.Fail(Msg(text="x"), metadata=creds, timeout=10), "refused to open")
    expect_error(grpc.StatusCode.INTERNAL, lambda: echo.Crash(Msg(text="x"), metadata=creds, timeout=10), "trapped")
    expect_error(grpc.StatusCode.UNAUTHENTICATED, lambda: echo.Unary(Msg(text="x"), metadata=[("x-api-key", "wrong")], timeout=10))
    print("status codes: ok")

    # A singleton that fails takes its streams with it: other open calls end
    # with UNAVAILABLE (the failing call itself gets INTERNAL), so clients reconnect.
    q = queue.Queue()
    q.put(Msg(text="open"))
    stream = echo.Bidi(iter(q.get, None), metadata=creds, timeout=20)
    assert next(stream).text == "open"
    answer = rpc_raw(addr, api_key, "state/trap", {})
    assert answer["error"]["code"] == -32603, answer
    err = expect_error(grpc.StatusCode.UNAVAILABLE, lambda: next(stream), "reconnect")
    q.put(None)
    assert echo.Unary(Msg(text="after"), metadata=creds, timeout=10).text == "after"
    print("singleton failure ends its streams: ok")

    # A plugin that never answers: the client gets a status within its deadline.
    started = time.monotonic()
    expect_error(grpc.StatusCode.DEADLINE_EXCEEDED, lambda: echo.Silent(Msg(text="x"), metadata=creds, timeout=0.5))
    assert time.monotonic() - started < 3, "the deadline held"
    print("deadline: ok")

    # A large message within the limit passes through whole.
    big = "b" * 300_000
    assert echo.Unary(Msg(text=big), metadata=creds, timeout=10).text == big
    # Over the gateway's max_message_bytes (1 MiB here): refused before the plugin sees it.
    expect_error(grpc.StatusCode.RESOURCE_EXHAUSTED, lambda: echo.Unary(Msg(text="o" * (1 << 20)), metadata=creds, timeout=10))
    print("large message: ok")

    # Backpressure: a client that stops reading holds the plugin's writes back;
    # the host queues a bounded number, and the plugin's write gives up at its deadline.
    flood = echo.Flood(Msg(text="go"), metadata=creds, timeout=30)
    assert len(next(flood).text) == 64 << 10
    time.sleep(2.5)
    received = 1
    error = None
    try:
        for _ in flood:
            received += 1
    except grpc.RpcError as e:
        error = e
    assert error is not None and error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
    flooded = rpc(addr, api_key, "state/grpc", {})["flooded"]
    assert flooded < 1000 and received == flooded, (flooded, received)
    print("backpressure: ok", flooded, "of 1000 written before the client read")

    # A hot swap ends open streams with UNAVAILABLE; a new call reaches the new version.
    q = queue.Queue()
    def gen():
        while True:
            item = q.get()
            if item is None:
                return
            yield item
    responses = echo.Bidi(gen(), metadata=creds, timeout=20)
    q.put(Msg(text="before"))
    assert next(responses).text == "before"
    with open(config_path) as f:
        text = f.read()
    with open(config_path, "w") as f:
        f.write(text.replace('generation = "1"', 'generation = "2"'))
    conn = http.client.HTTPConnection(addr, timeout=30)
    conn.request("POST", "/admin/reload?wait=true", b"")
    reload = conn.getresponse()
    assert reload.status == 200, (reload.status, reload.read())
    expect_error(grpc.StatusCode.UNAVAILABLE, lambda: next(responses), "replaced")
    q.put(None)
    assert echo.Unary(Msg(text="after"), metadata=creds, timeout=10).text == "after"
    print("hot swap: ok")


if __name__ == "__main__":
    main()
