"""One UAP execution agent that completes every test job it is offered,
for tests that drive the MAP side with another client. Usage:

    python uap_worker.py HOST:PORT API_KEY TYPE

Prints `listening <client id>` once it listens; for each job it accepts,
reports RUNNING, one telemetry record and a completed result with a step
report echoing the first payload's name. Runs until stdin closes.
"""

import sys
import threading

import grpc

from uap_agents import HUB, PB, Agent, Struct, ts, unset_kinds


def serve(agent):
    while True:
        msg = agent.next(timeout=3600)
        if isinstance(msg, tuple):
            return
        if not msg.HasField("session_proposal"):
            continue
        agent.run(msg.session_proposal.session_id, reports)


def reports(init):
    """Telemetry naming the first payload, then a completed result with one step for it."""
    name = init.payloads[0].attachment.name if init.payloads else ""
    metadata = init.payloads[0].metadata if init.payloads else Struct()
    summary = PB["Summary"]()
    summary.metadata.fields["echo"].struct_value.CopyFrom(metadata)
    summary.metadata["unset"] = unset_kinds(metadata)
    TR, TS = PB["TestResponse"], PB["TestStatus"]
    report = PB["StepReport"](name=name, status=PB["StepStatus"].Value("STEP_STATUS_PASSED"))
    return [
        TR(timestamp=ts(), telemetry=PB["Telemetry"](message=f"checked {name}", severity=PB["Severity"].Value("SEVERITY_INFO"))),
        TR(timestamp=ts(), result=PB["TestResult"](status=TS(state=PB["TestState"].Value("TEST_STATE_COMPLETED"), message="done"), reports=[report], summary=summary)),
    ]


def main():
    addr, api_key, job_type = sys.argv[1], sys.argv[2], sys.argv[3]
    hub = HUB.AgentHubStub(grpc.insecure_channel(addr))
    agent = Agent(hub, [("x-api-key", api_key)], f"worker-{job_type}", tests=[job_type])
    threading.Thread(target=serve, args=(agent,), daemon=True).start()
    print("listening", agent.client_id, flush=True)
    sys.stdin.read()
    agent.disconnect()


if __name__ == "__main__":
    main()
