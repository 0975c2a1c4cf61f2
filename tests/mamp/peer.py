"""A MAMP peer for tests: an HTTP server (Python's http.server) that
answers POST /mamp/v1/messages by the addressee's agent id:

- `flaky-*`: 503 to the first two attempts of each message_id, then 200;
- `down-*`: always 503;
- `refuse-*`: 403;
- anything else: 200 `{conversation_id, message_id, status: "received"}`,
  with a conversation id of its own for a new conversation.

Prints `listening PORT`, then one JSON line per request received:
{authorization, status, message}. Usage: python peer.py
"""

import json
import sys
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

attempts = Counter()
conversations = Counter()


class Peer(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        message = json.loads(body)
        agent = message["to"].rsplit("/", 1)[-1]
        attempts[message["message_id"]] += 1
        if agent.startswith("down-") or (agent.startswith("flaky-") and attempts[message["message_id"]] <= 2):
            status, answer = 503, {"error": "service_unavailable", "message": "try later", "status_code": 503}
        elif agent.startswith("refuse-"):
            status, answer = 403, {"error": "forbidden", "message": "not you", "status_code": 403}
        else:
            conv = message.get("conversation_id")
            if not conv:
                conversations["n"] += 1
                conv = f"peer-conv-{conversations['n']}"
            status, answer = 200, {"conversation_id": conv, "message_id": message["message_id"], "status": "received"}
        print(json.dumps({"authorization": self.headers.get("authorization"), "status": status, "message": message}), flush=True)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Peer)
    print("listening", server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
