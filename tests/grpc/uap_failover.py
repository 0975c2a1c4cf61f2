"""Two UAP execution agents for a cluster whose hub moves to another node.
Usage:

    python uap_failover.py HOLDER_ADDR RUNNER_ADDR

`holder` (registered and listening through HOLDER_ADDR) takes `fo-hold`
jobs: it reports RUNNING and then keeps the Execute stream open without a
result, until the stream ends. `runner` (through RUNNER_ADDR) completes
`fo-quick` jobs at once. Both use the anonymous tenant. When a Listen
stream ends, the agent listens again through the same address under the
same client id, every 200 ms until one stays open.

Commands on stdin, one a line: `stall` (the runner leaves proposals
unanswered until its current Listen stream ends; acknowledged by
`stalling runner`), `quit` (acknowledged by `quit`).

Lines on stdout, each flushed:

    listening AGENT CLIENT_ID
    executing AGENT INDEX SESSION       (the job's Execute stream is open)
    completed AGENT INDEX               (its result was sent and the stream ended)
    stalled AGENT SESSION               (a proposal left unanswered)
    ended execute AGENT INDEX CODE      (an Execute stream failed)
    ended listen AGENT CODE             (a Listen stream ended)
"""

import queue
import sys
import threading
import time

import grpc

from uap_agents import HUB, PB, Empty, stream_of, ts

LOCK = threading.Lock()
STOP = threading.Event()


def out(line):
    with LOCK:
        print(line, flush=True)


class Worker:
    def __init__(self, name, addr, job_type, hold):
        self.name, self.hold = name, hold
        self.hub = HUB.AgentHubStub(grpc.insecure_channel(addr))
        caps = [PB["Capability"](test=PB["TestCapability"](type=job_type))]
        self.client_id = self.hub.Register(PB["AgentRegistration"](display_name=name, capabilities=caps), timeout=10).client_id
        assert self.client_id, f"{name}: Register issued no client id"
        self.stall = threading.Event()
        self.listen = None

    def serve(self):
        first = True
        while not STOP.is_set():
            outbox = queue.Queue()
            outbox.put(PB["ListenRequest"](ready=Empty()))
            self.listen = self.hub.Listen(stream_of(outbox), metadata=[("x-client-id", self.client_id)])
            if first:
                out(f"listening {self.name} {self.client_id}")
                first = False
            code = "OK"
            try:
                for msg in self.listen:
                    if msg.HasField("session_proposal"):
                        self.proposed(msg.session_proposal.session_id, outbox)
                    elif msg.HasField("session_ready"):
                        self.execute(msg.session_ready.session_id)
            except grpc.RpcError as e:
                code = e.code().name
            outbox.put(None)
            if STOP.is_set():
                return
            out(f"ended listen {self.name} {code}")
            # A stall lasts as long as the stream it was asked on.
            self.stall.clear()
            time.sleep(0.2)

    def proposed(self, session, outbox):
        if self.stall.is_set():
            out(f"stalled {self.name} {session}")
            return
        outbox.put(PB["ListenRequest"](session_acceptance=PB["SessionAcceptance"](session_id=session, accepted=True)))

    def execute(self, session):
        q = queue.Queue()
        call = self.hub.Execute(stream_of(q), metadata=[("x-session-id", session)])
        index = "?"
        try:
            init = next(call)
            index = str(int(init.payloads[0].metadata["index"]))
            out(f"executing {self.name} {index} {session}")
            TR, TS, STATE = PB["TestResponse"], PB["TestStatus"], PB["TestState"]
            q.put(TR(timestamp=ts(), status=TS(state=STATE.Value("TEST_STATE_RUNNING"), message="running")))
            if not self.hold:
                q.put(TR(timestamp=ts(), result=PB["TestResult"](status=TS(state=STATE.Value("TEST_STATE_COMPLETED"), message="done"))))
            for _ in call:
                pass
            out(f"completed {self.name} {index}")
        except grpc.RpcError as e:
            out(f"ended execute {self.name} {index} {e.code().name}")
        finally:
            q.put(None)


def main():
    holder = Worker("holder", sys.argv[1], "fo-hold", hold=True)
    runner = Worker("runner", sys.argv[2], "fo-quick", hold=False)
    for w in (holder, runner):
        threading.Thread(target=w.serve, daemon=True).start()
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "stall":
            runner.stall.set()
            out("stalling runner")
        elif cmd == "quit":
            break
    STOP.set()
    for w in (holder, runner):
        if w.listen is not None:
            w.listen.cancel()
    out("quit")


if __name__ == "__main__":
    main()
