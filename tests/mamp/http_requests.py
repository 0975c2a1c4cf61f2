"""Send HTTP requests with Python's http.client, a client the gateway's
tests did not write. Usage:

    python http_requests.py HOST:PORT < requests.json

`requests.json` is a list of {method, path, headers: {..}, body: "text"}
(`body_repeat: N` repeats the body N times). Prints one JSON list of
{status, content_type, body} (body parsed as JSON when it is JSON).
"""

import http.client
import json
import sys


def main():
    addr = sys.argv[1]
    answers = []
    for r in json.load(sys.stdin):
        conn = http.client.HTTPConnection(addr, timeout=10)
        body = (r.get("body") or "") * r.get("body_repeat", 1)
        conn.request(r["method"], r["path"], body=body.encode() if body else None, headers=r.get("headers", {}))
        resp = conn.getresponse()
        raw = resp.read().decode("utf-8", "replace")
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = raw
        answers.append({"status": resp.status, "content_type": resp.getheader("content-type"), "body": parsed})
        conn.close()
    print(json.dumps(answers))


if __name__ == "__main__":
    main()
