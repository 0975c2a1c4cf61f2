"""The UAP hub across a kill -9 of the gateway. Usage:

    python uap_restart.py HOST:PORT API_KEY

Phase one leaves a job running (accepted, its Execute stream open), one
proposed (the agent does not answer) and one queued (no capable agent),
prints `ready`, and waits for a line on stdin: the address of the restarted
gateway. Phase two checks what the restart left: the running job failed
with a reason, the proposed one is queued again, the queued one is still
queued and goes to the first capable agent that listens, the old streams
ended, and finished jobs kept their results and history.
"""

import base64
import sys

import grpc

from uap_agents import HUB, PB, Map, Agent


def main():
    addr, api_key = sys.argv[1], sys.argv[2]
    creds = [("x-api-key", api_key)]
    hub = HUB.AgentHubStub(grpc.insecure_channel(addr))
    m = Map(addr, api_key)
    worker = Agent(hub, creds, "worker", tests=["long"])
    mute = Agent(hub, creds, "mute", tests=["mute"])
    # One job completes first, with an attachment in its result.
    done = m.call("uap/submit", {"kind": "test", "type": "long"})["job"]["id"]
    p = worker.proposal()
    worker.accept(p.session_id)
    init, q, call = worker.execute(p.session_id)
    TS = PB["TestStatus"]
    result = PB["TestResult"](status=TS(state=PB["TestState"].Value("TEST_STATE_COMPLETED")), attachments=[PB["Attachment"](name="out.bin", data=bytes(range(200)))])
    q.put(PB["TestResponse"](result=result))
    assert list(call) == []
    q.put(None)
    m.wait_status(done, "completed")
    running = m.call("uap/submit", {"kind": "test", "type": "long", "payloads": [{"type": "x", "metadata": {"n": 1}}]})["job"]["id"]
    p = worker.proposal()
    worker.accept(p.session_id)
    init, q, call = worker.execute(p.session_id)
    proposed = m.call("uap/submit", {"kind": "test", "type": "mute"})["job"]["id"]
    mute.proposal()
    queued = m.call("uap/submit", {"kind": "test", "type": "nobody"})["job"]["id"]
    assert [m.job(j)["status"] for j in (running, proposed, queued)] == ["running", "proposed", "queued"]
    print("ready", flush=True)

    addr = sys.stdin.readline().strip()
    # The old streams ended with the process.
    assert worker.next()[0] == "ended" and mute.next()[0] == "ended"
    try:
        list(call)
        raise AssertionError("the Execute stream should have ended with an error")
    except grpc.RpcError as e:
        assert e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), e.code()
    q.put(None)

    hub = HUB.AgentHubStub(grpc.insecure_channel(addr))
    m = Map(addr, api_key)
    kept = m.job(done)
    assert kept["status"] == "completed" and base64.b64decode(kept["result"]["attachments"][0]["data"]) == bytes(range(200)), kept
    failed = m.job(running)
    assert failed["status"] == "failed" and "restarted" in failed["error"], failed
    assert m.job(proposed)["status"] == "queued", m.job(proposed)
    assert m.job(queued)["status"] == "queued"
    history = [h["status"] for h in m.call("uap/get", {"jobId": running})["history"]]
    assert history[:3] == ["queued", "proposed", "running"] and history[-1] == "failed", history
    # Registrations survive: the old client id may listen again, and gets the requeued job.
    late = Agent(hub, creds, "late", tests=["nobody"])
    assert late.proposal().test.type == "nobody"
    again = Agent(hub, creds, "mute", client_id=mute.client_id)
    assert again.proposal().test.type == "mute"
    print("restart: ok")


if __name__ == "__main__":
    main()
