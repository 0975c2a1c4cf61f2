"""Load on the UAP hub: AGENTS grpcio agents, JOBS test jobs submitted over
MAP (HTTP JSON-RPC) from several threads. Every job must be executed
exactly once and end completed. Prints one line of results:

    load: N jobs over M agents in S s: R jobs/s, submit-to-complete p50 X ms p99 Y ms

Usage: python uap_load.py HOST:PORT API_KEY [AGENTS] [JOBS]   (API_KEY "" for the anonymous tenant)
"""

import collections
import sys
import uuid
import threading
import time

import grpc

from uap_agents import PB, HUB, Map, Agent, credentials, ts


def run_agent(agent, executed, lock, stop):
    """Accept every proposal, execute it, report a result."""
    while not stop.is_set():
        try:
            msg = agent.next(timeout=0.2)
        except Exception:
            continue
        if isinstance(msg, tuple):
            return
        if not msg.HasField("session_proposal"):
            continue
        done = PB["TestResponse"](timestamp=ts(), result=PB["TestResult"](status=PB["TestStatus"](state=PB["TestState"].Value("TEST_STATE_COMPLETED"))))
        init = agent.run(msg.session_proposal.session_id, lambda init: [done])
        index = init.payloads[0].metadata["index"]
        with lock:
            executed[index] += 1
            executed[f"done-{index}"] = time.monotonic()


def main():
    addr, api_key = sys.argv[1], sys.argv[2]
    n_agents = int(sys.argv[3]) if len(sys.argv) > 3 else 50
    n_jobs = int(sys.argv[4]) if len(sys.argv) > 4 else 500
    creds = credentials(api_key)
    channel = grpc.insecure_channel(addr)
    hub = HUB.AgentHubStub(channel)
    executed, lock, stop = collections.Counter(), threading.Lock(), threading.Event()
    # A type of this run's own, so runs against one gateway do not mix.
    job_type = f"load-{uuid.uuid4().hex[:8]}"
    agents = [Agent(hub, creds, f"load-{i}", tests=[job_type]) for i in range(n_agents)]
    threads = [threading.Thread(target=run_agent, args=(a, executed, lock, stop), daemon=True) for a in agents]
    for t in threads:
        t.start()

    submitted = {}
    started = time.monotonic()

    def submit(indexes):
        m = Map(addr, api_key)
        for i in indexes:
            at = time.monotonic()
            job = m.call("uap/submit", {"kind": "test", "type": job_type, "payloads": [{"type": "case", "metadata": {"index": float(i)}}]})["job"]
            submitted[float(i)] = (job["id"], at)

    submitters = [threading.Thread(target=submit, args=(range(k, n_jobs, 8),)) for k in range(8)]
    for t in submitters:
        t.start()
    for t in submitters:
        t.join()
    deadline = time.monotonic() + 120
    while True:
        with lock:
            done = sum(1 for k in executed if isinstance(k, str))
        if done == n_jobs:
            break
        assert time.monotonic() < deadline, f"only {done} of {n_jobs} jobs done"
        time.sleep(0.01)
    elapsed = time.monotonic() - started
    stop.set()
    for a in agents:
        a.disconnect()

    runs = {k: v for k, v in executed.items() if not isinstance(k, str)}
    assert len(runs) == n_jobs and all(v == 1 for v in runs.values()), f"executions per job: {collections.Counter(runs.values())}"
    m = Map(addr, api_key)
    statuses = collections.Counter()
    cursor = None
    while True:
        page = m.call("uap/list", {"limit": 500, **({"cursor": cursor} if cursor else {})})
        statuses.update(j["status"] for j in page["jobs"] if j["type"] == job_type)
        if not page["hasMore"]:
            break
        cursor = page["nextCursor"]
    assert statuses == {"completed": n_jobs}, statuses
    latencies = sorted((executed[f"done-{i}"] - at) * 1000 for i, (_, at) in submitted.items())
    p = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]
    print(f"load: {n_jobs} jobs over {n_agents} agents in {elapsed:.2f} s: {n_jobs / elapsed:.0f} jobs/s, "
          f"submit-to-complete p50 {p(0.5):.1f} ms p99 {p(0.99):.1f} ms; each executed exactly once")


if __name__ == "__main__":
    main()
