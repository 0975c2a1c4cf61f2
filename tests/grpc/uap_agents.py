"""UAP execution agents written with grpcio against a gateway running the
UAP hub plugin, with the MAP side driven over HTTP JSON-RPC.

Stubs are generated at start from the project's own `.proto` files
(plugins/uap/proto), so the agents are what any Python UAP user would
write. Usage:

    python uap_agents.py HOST:PORT API_KEY

The gateway's uap plugin must run with acceptanceTimeoutMs = 500.
Exits non-zero on the first failed check.
"""

import base64
import http.client
import importlib
import json
import os
import queue
import sys
import tempfile
import threading
import time

import grpc
import grpc_tools
from grpc_tools import protoc
from google.protobuf import json_format

from grpc_checks import expect_error

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "..", "..", "plugins", "uap", "proto")
ACCEPTANCE_TIMEOUT = 0.5


def stubs():
    out = tempfile.mkdtemp(prefix="uap-stubs-")
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    files = sorted(os.path.join(PROTO, f) for f in os.listdir(PROTO) if f.endswith(".proto"))
    code = protoc.main(["protoc", f"-I{PROTO}", f"-I{well_known}", f"--python_out={out}", f"--grpc_python_out={out}", *files])
    assert code == 0, f"protoc failed with {code}"
    sys.path.insert(0, out)
    pb = {}
    for f in files:
        name = os.path.basename(f)[:-6]
        module = importlib.import_module(f"{name}_pb2")
        pb[name] = getattr(module, name, module)
    return pb, importlib.import_module("AgentHub_pb2_grpc")


PB, HUB = stubs()
from google.protobuf.empty_pb2 import Empty  # noqa: E402  (after the stubs put protobuf in place)
from google.protobuf.struct_pb2 import Struct  # noqa: E402


def credentials(api_key):
    """gRPC metadata for the tenant's API key ("" for the anonymous tenant)."""
    return [("x-api-key", api_key)] if api_key else []


class Map:
    """One MAP session over HTTP POST /map/rpc."""

    def __init__(self, addr, api_key):
        self.conn = http.client.HTTPConnection(addr, timeout=10)
        self.headers = {"content-type": "application/json", **({"x-api-key": api_key} if api_key else {})}
        self.session = None
        self.next_id = 1
        self.call("map/connect", {"protocolVersion": 1, "participant": {"type": "client", "name": "uap-test"}})

    def post(self, method, params):
        h = dict(self.headers)
        if self.session:
            h["map-session-id"] = self.session
        self.next_id += 1
        self.conn.request("POST", "/map/rpc", json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}), h)
        resp = self.conn.getresponse()
        body = json.loads(resp.read())
        self.session = self.session or resp.getheader("map-session-id")
        return body

    def call(self, method, params):
        answer = self.post(method, params)
        assert "result" in answer, f"{method}: {answer}"
        return answer["result"]

    def error(self, method, params):
        answer = self.post(method, params)
        assert "error" in answer, f"{method} should fail: {answer}"
        return answer["error"]

    def job(self, job_id):
        return self.call("uap/get", {"jobId": job_id})["job"]

    def wait_status(self, job_id, status, timeout=10):
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job["status"] == status:
                return job
            assert time.monotonic() < deadline, f"job {job_id} stayed {job['status']}, expected {status}: {job}"
            time.sleep(0.02)


def stream_of(q):
    """A request iterator fed from a queue (None ends it)."""
    while True:
        item = q.get()
        if item is None:
            return
        yield item


class Agent:
    """A UAP execution agent: registered, listening, answering proposals."""

    def __init__(self, hub, creds, name, tests=(), translations=(), client_id=None):
        """Register (unless `client_id` says who it already is), then listen."""
        caps = [PB["Capability"](test=PB["TestCapability"](type=t)) for t in tests]
        caps += [PB["Capability"](translation=PB["TranslationCapability"](type=t)) for t in translations]
        self.hub, self.creds, self.name = hub, creds, name
        self.client_id = client_id or hub.Register(PB["AgentRegistration"](display_name=name, capabilities=caps), metadata=creds, timeout=10).client_id
        assert self.client_id, "Register issues a client id"
        self.outbox = queue.Queue()
        self.inbox = queue.Queue()
        self.outbox.put(PB["ListenRequest"](ready=Empty()))
        self.listen = hub.Listen(stream_of(self.outbox), metadata=creds + [("x-client-id", self.client_id)])
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            for resp in self.listen:
                self.inbox.put(resp)
            self.inbox.put(("ended", grpc.StatusCode.OK))
        except grpc.RpcError as e:
            self.inbox.put(("ended", e.code()))

    def next(self, timeout=10):
        return self.inbox.get(timeout=timeout)

    def proposal(self, timeout=10):
        msg = self.next(timeout)
        assert not isinstance(msg, tuple) and msg.HasField("session_proposal"), f"{self.name} expected a proposal, got {msg}"
        return msg.session_proposal

    def nothing_for(self, seconds):
        try:
            msg = self.inbox.get(timeout=seconds)
        except queue.Empty:
            return
        raise AssertionError(f"{self.name} should have received nothing, got {msg}")

    def answer(self, session_id, accepted, reason=""):
        self.outbox.put(PB["ListenRequest"](session_acceptance=PB["SessionAcceptance"](session_id=session_id, accepted=accepted, reason=reason)))

    def accept(self, session_id):
        self.answer(session_id, True)
        ready = self.next()
        assert not isinstance(ready, tuple) and ready.HasField("session_ready") and ready.session_ready.session_id == session_id, ready

    def execute(self, session_id, method="Execute"):
        """Open the session's stream: (its first message, the request queue, the response iterator)."""
        q = queue.Queue()
        call = getattr(self.hub, method)(stream_of(q), metadata=self.creds + [("x-session-id", session_id)])
        return next(call), q, call

    def run(self, session_id, reports):
        """Accept a proposed test session and run it: RUNNING, then the
        TestResponses `reports(init)` gives, then the end of the stream.
        Returns its TestInit."""
        self.accept(session_id)
        init, q, call = self.execute(session_id)
        TR, TS = PB["TestResponse"], PB["TestStatus"]
        q.put(TR(timestamp=ts(), status=TS(state=PB["TestState"].Value("TEST_STATE_RUNNING"), message="running")))
        for r in reports(init):
            q.put(r)
        for _ in call:
            pass
        q.put(None)
        return init

    def disconnect(self):
        self.listen.cancel()


def ts():
    t = PB["TestResponse"]().timestamp
    t.GetCurrentTime()
    return t


def happy_path(hub, creds, m):
    agent = Agent(hub, creds, "runner", tests=["pytest"])
    blob = bytes(range(256)) * 4
    payloads = [
        {"type": "suite", "attachment": {"name": "tests.zip", "mimeType": "application/zip", "data": base64.b64encode(blob).decode()}, "metadata": {"branch": "main", "shard": 1}},
        {"type": "config", "attachment": {"name": "cfg.json", "mimeType": "application/json", "data": base64.b64encode(b'{"a":1}').decode()}},
    ]
    job = m.call("uap/submit", {"kind": "test", "type": "pytest", "payloads": payloads})["job"]
    assert job["status"] in ("queued", "proposed") and job["kind"] == "test", job
    proposal = agent.proposal()
    assert proposal.session_id.startswith("JOB-") and proposal.test.type == "pytest", proposal
    assert m.job(job["id"])["status"] == "proposed"
    agent.accept(proposal.session_id)
    assert m.wait_status(job["id"], "running")["agent"] == agent.client_id
    init, q, call = agent.execute(proposal.session_id)
    assert init.test_type == "pytest" and len(init.payloads) == 2, init
    assert init.payloads[0].attachment.data == blob and init.payloads[0].attachment.mime_type == "application/zip"
    assert init.payloads[0].metadata["branch"] == "main" and init.payloads[1].attachment.data == b'{"a":1}'
    TR, TS, TL = PB["TestResponse"], PB["TestStatus"], PB["Telemetry"]
    q.put(TR(timestamp=ts(), status=TS(state=PB["TestState"].Value("TEST_STATE_RUNNING"), message="started")))
    q.put(TR(timestamp=ts(), telemetry=TL(message="50% done", severity=PB["Severity"].Value("SEVERITY_INFO"), source="runner",
                                           attachments=[PB["Attachment"](name="log.txt", mime_type="text/plain", data=b"line 1\n")])))
    step = PB["StepReport"]
    reports = [step(name="suite", status=PB["StepStatus"].Value("STEP_STATUS_PASSED"), steps=[
        step(name="case 1", status=PB["StepStatus"].Value("STEP_STATUS_PASSED")),
        step(name="case 2", status=PB["StepStatus"].Value("STEP_STATUS_SKIPPED"), steps=[step(name="setup", status=PB["StepStatus"].Value("STEP_STATUS_PASSED"))]),
    ])]
    result = PB["TestResult"](status=TS(state=PB["TestState"].Value("TEST_STATE_COMPLETED"), message="all green"), reports=reports,
                              attachments=[PB["Attachment"](name="report.xml", mime_type="application/xml", data=b"<ok/>")])
    q.put(TR(timestamp=ts(), result=result))
    assert list(call) == [], "the hub sends nothing after TestInit"
    assert call.code() == grpc.StatusCode.OK, call.code()
    q.put(None)
    done = m.wait_status(job["id"], "completed")
    r = done["result"]
    assert r["status"]["state"] == "TEST_STATE_COMPLETED" and r["status"]["message"] == "all green", r
    assert r["reports"][0]["steps"][1]["steps"][0]["name"] == "setup", r
    assert r["reports"][0]["steps"][1]["status"] == "STEP_STATUS_SKIPPED", r
    assert base64.b64decode(r["attachments"][0]["data"]) == b"<ok/>", r
    history = m.call("uap/get", {"jobId": job["id"]})["history"]
    states = [h.get("state") for h in history if h.get("state")]
    assert "TEST_STATE_RUNNING" in states, history
    telemetry = [h["telemetry"] for h in history if h.get("telemetry")]
    assert telemetry and telemetry[0]["message"] == "50% done" and telemetry[0]["severity"] == "SEVERITY_INFO", telemetry
    assert base64.b64decode(telemetry[0]["attachments"][0]["data"]) == b"line 1\n"
    assert [h["status"] for h in history][:3] == ["queued", "proposed", "running"], history
    listed = m.call("uap/agents", {})["agents"]
    mine = [a for a in listed if a["clientId"] == agent.client_id][0]
    assert mine["available"] and mine["displayName"] == "runner" and mine["capabilities"][0]["test"]["type"] == "pytest", mine
    agent.disconnect()
    print("happy path: ok")


def rejection(hub, creds, m):
    a, b = Agent(hub, creds, "lint-a", tests=["lint"]), Agent(hub, creds, "lint-b", tests=["lint"])
    job = m.call("uap/submit", {"kind": "test", "type": "lint", "payloads": []})["job"]
    first = None
    for agent in (a, b):
        try:
            first = (agent, agent.proposal(timeout=2))
            break
        except queue.Empty:
            continue
    assert first, "one of the two got the proposal"
    decliner, p1 = first
    other = b if decliner is a else a
    decliner.answer(p1.session_id, False, "busy")
    p2 = other.proposal()
    assert p2.session_id != p1.session_id
    # The decliner never gets it again, even when the other declines too.
    other.answer(p2.session_id, False, "also busy")
    decliner.nothing_for(0.5)
    queued = m.wait_status(job["id"], "queued")
    assert sorted(queued["declinedBy"]) == sorted([a.client_id, b.client_id]), queued
    # A newcomer gets it.
    c = Agent(hub, creds, "lint-c", tests=["lint"])
    c.accept(c.proposal().session_id)
    m.wait_status(job["id"], "running")
    # A late answer to a lapsed proposal is NOT_FOUND and ends that agent's Listen.
    decliner.answer(p1.session_id, True)
    end = decliner.next()
    assert end == ("ended", grpc.StatusCode.NOT_FOUND), end
    for agent in (other, c):
        agent.disconnect()
    m.wait_status(job["id"], "failed")
    print("rejection: ok")


def acceptance_timeout(hub, creds, m):
    slow = Agent(hub, creds, "slow", tests=["slow"])
    job = m.call("uap/submit", {"kind": "test", "type": "slow"})["job"]
    p = slow.proposal()
    started = time.monotonic()
    queued = m.wait_status(job["id"], "queued", timeout=5)
    assert time.monotonic() - started < ACCEPTANCE_TIMEOUT + 2
    assert queued["declinedBy"] == [slow.client_id], queued
    slow.nothing_for(0.3)
    # Its answer comes too late.
    slow.answer(p.session_id, True)
    assert slow.next() == ("ended", grpc.StatusCode.NOT_FOUND)
    m.call("uap/cancel", {"jobId": job["id"]})
    print("acceptance timeout: ok")


def late_agent_and_cancel(hub, creds, m):
    waiting = m.call("uap/submit", {"kind": "test", "type": "later"})["job"]
    cancelled = m.call("uap/submit", {"kind": "test", "type": "never"})["job"]
    time.sleep(0.2)
    assert m.job(waiting["id"])["status"] == "queued"
    c = m.call("uap/cancel", {"jobId": cancelled["id"]})["job"]
    assert c["status"] == "cancelled", c
    assert m.error("uap/cancel", {"jobId": cancelled["id"]})["code"] == 91001
    assert m.error("uap/get", {"jobId": "job-nope"})["code"] == 91000
    late = Agent(hub, creds, "late", tests=["later", "never"])
    p = late.proposal()
    assert p.test.type == "later", p
    late.nothing_for(0.3)  # the cancelled job is never proposed
    late.accept(p.session_id)
    init, q, call = late.execute(p.session_id)
    # Cancelling a running job ends its stream.
    m.call("uap/cancel", {"jobId": waiting["id"]})
    expect_error(grpc.StatusCode.CANCELLED, lambda: list(call))
    q.put(None)
    assert m.job(waiting["id"])["status"] == "cancelled"
    late.disconnect()
    print("queued until an agent arrives, cancel: ok")


def disconnect_mid_session(hub, creds, m):
    agent = Agent(hub, creds, "flaky", tests=["flaky"])
    job = m.call("uap/submit", {"kind": "test", "type": "flaky"})["job"]
    p = agent.proposal()
    agent.accept(p.session_id)
    init, q, call = agent.execute(p.session_id)
    agent.disconnect()
    failed = m.wait_status(job["id"], "failed")
    assert "agent disconnected" in failed["error"], failed
    expect_error(grpc.StatusCode.UNAVAILABLE, lambda: list(call), "disconnected")
    q.put(None)
    print("disconnect mid-session: ok")


def translation(hub, creds, m):
    agent = Agent(hub, creds, "translator", translations=["openapi"])
    src = b"openapi: 3.0.0\n"
    job = m.call("uap/submit", {"kind": "translation", "type": "openapi", "targetFormat": "asyncapi",
                                "payloads": [{"type": "spec", "attachment": {"name": "a.yaml", "mimeType": "application/yaml", "data": base64.b64encode(src).decode()}}]})["job"]
    p = agent.proposal()
    assert p.session_id.startswith("TRN-") and p.translation.type == "openapi", p
    agent.accept(p.session_id)
    # A test session's stream does not serve a translation.
    expect_error(grpc.StatusCode.NOT_FOUND, lambda: agent.execute(p.session_id, "Execute"))
    init, q, call = agent.execute(p.session_id, "Translate")
    assert init.target_format == "asyncapi" and init.payloads[0].attachment.data == src, init
    out = PB["Payload"](type="spec", attachment=PB["Attachment"](name="b.yaml", mime_type="application/yaml", data=b"asyncapi: 2.6.0\n"))
    TRR, TRS = PB["TranslationResponse"], PB["TranslationStatus"]
    q.put(TRR(status=TRS(state=PB["TranslationState"].Value("TRANSLATION_STATE_PROCESSING"))))
    q.put(TRR(result=PB["TranslationResult"](status=TRS(state=PB["TranslationState"].Value("TRANSLATION_STATE_COMPLETED")), payloads=[out])))
    assert list(call) == []
    q.put(None)
    done = m.wait_status(job["id"], "completed")
    assert base64.b64decode(done["result"]["payloads"][0]["attachment"]["data"]) == b"asyncapi: 2.6.0\n", done
    agent.disconnect()
    print("translation: ok")


def malformed(hub, creds, channel, m):
    raw = lambda path, kind="stream_stream": getattr(channel, kind)(path, request_serializer=None, response_deserializer=None)
    # Listen without, or with an unknown, client id.
    expect_error(grpc.StatusCode.NOT_FOUND, lambda: list(hub.Listen(iter([PB["ListenRequest"](ready=Empty())]), metadata=creds)), "x-client-id")
    expect_error(grpc.StatusCode.NOT_FOUND, lambda: list(hub.Listen(iter([PB["ListenRequest"](ready=Empty())]), metadata=creds + [("x-client-id", "agent-nobody")])), "unknown client id")
    agent = Agent(hub, creds, "picky", tests=["picky"])
    # A ListenRequest with neither ready nor an acceptance.
    agent.outbox.put(PB["ListenRequest"]())
    assert agent.next() == ("ended", grpc.StatusCode.INVALID_ARGUMENT)
    # Undecodable protobuf on Listen and Register.
    cid = hub.Register(PB["AgentRegistration"](display_name="raw"), metadata=creds, timeout=10).client_id
    expect_error(grpc.StatusCode.INVALID_ARGUMENT, lambda: list(raw("/uap.v1.AgentHub/Listen")(iter([b"\xff\xff\xff"]), metadata=creds + [("x-client-id", cid)])), "undecodable")
    expect_error(grpc.StatusCode.INVALID_ARGUMENT, lambda: raw("/uap.v1.AgentHub/Register", "unary_unary")(b"\x0a\xff", metadata=creds, timeout=10), "undecodable")
    # A capability with no format.
    expect_error(grpc.StatusCode.INVALID_ARGUMENT, lambda: hub.Register(PB["AgentRegistration"](display_name="x", capabilities=[PB["Capability"]()]), metadata=creds, timeout=10), "capabilities[0]")
    # Execute for an unknown session, or without one.
    expect_error(grpc.StatusCode.NOT_FOUND, lambda: list(hub.Execute(iter([]), metadata=creds + [("x-session-id", "JOB-nope")])))
    expect_error(grpc.StatusCode.NOT_FOUND, lambda: list(hub.Execute(iter([]), metadata=creds)), "x-session-id")
    # Without credentials.
    expect_error(grpc.StatusCode.UNAUTHENTICATED, lambda: hub.Register(PB["AgentRegistration"](display_name="x"), metadata=[("x-api-key", "wrong")], timeout=10))
    # Bad MAP requests.
    assert m.error("uap/submit", {"kind": "video", "type": "x"})["code"] == -32602
    assert m.error("uap/submit", {"kind": "translation", "type": "x"})["code"] == -32602
    assert m.error("uap/submit", {"kind": "test", "type": "x", "payloads": [{"attachment": {"data": "not base64!"}}]})["code"] == -32602
    assert m.error("uap/list", {"limit": 0})["code"] == -32602
    print("malformed traffic: ok")


# Every kind of JSON value, nested, with the edge cases of a double.
METADATA = {
    "text": "h\u00e9llo \u2713", "empty": "", "": "an empty key", "null": None, "yes": True, "no": False,
    "int": 42, "negative": -7, "zero": 0, "fraction": 0.1, "largest exact": 9007199254740991, "huge": 1.5e300, "tiny": -2.5e-8,
    # Doubles whose shortest text a best-effort float parser reads one bit off.
    "sum": 0.011399999999999999, "small": -1.7969314742435888e-9,
    "list": [1, "two", None, False, [], {}, [None, [3.25]]],
    "object": {"nested": {"deeper": {"null": None, "list": [{"a": None}]}}, "empty": {}},
    "empty list": [],
}


def unset_kinds(value, path="$"):
    """Paths of the google.protobuf.Values in a Struct or Value with no kind set."""
    if isinstance(value, Struct):
        return [p for k, v in value.fields.items() for p in unset_kinds(v, f"{path}.{k}")]
    kind = value.WhichOneof("kind")
    if kind is None:
        return [path]
    if kind == "struct_value":
        return unset_kinds(value.struct_value, path)
    if kind == "list_value":
        return [p for i, v in enumerate(value.list_value.values) for p in unset_kinds(v, f"{path}[{i}]")]
    return []


def as_struct(value):
    return json_format.ParseDict(value, Struct())


def exact(value):
    """JSON text that tells 42 from 42.0 and null from absent."""
    return json.dumps(value, sort_keys=True)


def struct_values(hub, creds, m):
    """Payload metadata reaches the agent as the Struct it stands for (null
    as null_value), and the Structs of results come back as the same JSON."""
    expected = as_struct(METADATA)
    agent = Agent(hub, creds, "structs", tests=["structs"], translations=["structs"])
    attachment = {"name": "m.json", "mimeType": "application/json", "data": ""}
    # A test job: metadata in, the same metadata in the result's summaries out.
    job = m.call("uap/submit", {"kind": "test", "type": "structs", "payloads": [{"type": "input", "attachment": attachment, "metadata": METADATA}]})["job"]
    summary = PB["Summary"](metadata=expected)

    def test_result(init):
        got = init.payloads[0].metadata
        assert not unset_kinds(got), f"values without a kind: {unset_kinds(got)}"
        assert got == expected, f"{json_format.MessageToDict(got)} != {METADATA}"
        step = PB["StepReport"](name="s", status=PB["StepStatus"].Value("STEP_STATUS_PASSED"), summary=summary)
        status = PB["TestStatus"](state=PB["TestState"].Value("TEST_STATE_COMPLETED"))
        return [PB["TestResponse"](timestamp=ts(), result=PB["TestResult"](status=status, summary=summary, reports=[step]))]

    agent.run(agent.proposal().session_id, test_result)
    r = m.wait_status(job["id"], "completed")["result"]
    assert exact(r["summary"]["metadata"]) == exact(METADATA), r["summary"]["metadata"]
    assert exact(r["reports"][0]["summary"]["metadata"]) == exact(METADATA), r["reports"][0]
    # A translation job: the same, through TranslationInit and the translated payloads.
    job = m.call("uap/submit", {"kind": "translation", "type": "structs", "targetFormat": "same",
                                "payloads": [{"type": "input", "attachment": attachment, "metadata": METADATA}]})["job"]
    p = agent.proposal()
    agent.accept(p.session_id)
    init, q, call = agent.execute(p.session_id, "Translate")
    assert not unset_kinds(init.payloads[0].metadata), f"values without a kind: {unset_kinds(init.payloads[0].metadata)}"
    assert init.payloads[0].metadata == expected, json_format.MessageToDict(init.payloads[0].metadata)
    out = PB["Payload"](type="output", attachment=PB["Attachment"](name="m.json"), metadata=expected)
    status = PB["TranslationStatus"](state=PB["TranslationState"].Value("TRANSLATION_STATE_COMPLETED"))
    q.put(PB["TranslationResponse"](result=PB["TranslationResult"](status=status, payloads=[out], summary=summary)))
    assert list(call) == []
    q.put(None)
    r = m.wait_status(job["id"], "completed")["result"]
    assert exact(r["payloads"][0]["metadata"]) == exact(METADATA), r["payloads"][0]
    assert exact(r["summary"]["metadata"]) == exact(METADATA), r["summary"]
    # JSON has no NaN: a result holding one is refused, and the job fails.
    job = m.call("uap/submit", {"kind": "test", "type": "structs"})["job"]
    p = agent.proposal()
    agent.accept(p.session_id)
    init, q, call = agent.execute(p.session_id)
    nan = PB["Summary"](metadata=as_struct({"ratio": 0}))
    nan.metadata.fields["ratio"].number_value = float("nan")
    q.put(PB["TestResponse"](result=PB["TestResult"](status=PB["TestStatus"](state=PB["TestState"].Value("TEST_STATE_COMPLETED")), summary=nan)))
    expect_error(grpc.StatusCode.INVALID_ARGUMENT, lambda: list(call), "NaN")
    q.put(None)
    failed = m.wait_status(job["id"], "failed")
    assert "result" not in failed, failed
    # A number a double cannot hold exactly is refused, not rounded.
    assert m.error("uap/submit", {"kind": "test", "type": "structs", "payloads": [{"type": "x", "metadata": {"n": 2 ** 53 + 1}}]})["code"] == -32602
    agent.disconnect()
    print("struct values: ok")


def never_proposed(hub, creds):
    agent = Agent(hub, creds, "stray", tests=["stray"])
    agent.answer("JOB-never-proposed", True)
    end = agent.next()
    assert end == ("ended", grpc.StatusCode.NOT_FOUND), end
    print("acceptance of a session never proposed: ok")


def listing(m):
    page = m.call("uap/list", {"limit": 2})
    assert len(page["jobs"]) == 2 and page["hasMore"] and page["nextCursor"], page
    rest = m.call("uap/list", {"limit": 500, "cursor": page["nextCursor"]})
    ids = [j["id"] for j in page["jobs"] + rest["jobs"]]
    assert len(ids) == len(set(ids)) and ids == sorted(ids, reverse=True), ids
    completed = m.call("uap/list", {"status": "completed", "limit": 500})["jobs"]
    assert completed and all(j["status"] == "completed" for j in completed), completed
    print("listing: ok")


def main():
    addr, api_key = sys.argv[1], sys.argv[2]
    creds = credentials(api_key)
    channel = grpc.insecure_channel(addr)
    hub = HUB.AgentHubStub(channel)
    m = Map(addr, api_key)
    happy_path(hub, creds, m)
    rejection(hub, creds, m)
    acceptance_timeout(hub, creds, m)
    late_agent_and_cancel(hub, creds, m)
    disconnect_mid_session(hub, creds, m)
    translation(hub, creds, m)
    struct_values(hub, creds, m)
    never_proposed(hub, creds)
    malformed(hub, creds, channel, m)
    listing(m)


if __name__ == "__main__":
    main()
