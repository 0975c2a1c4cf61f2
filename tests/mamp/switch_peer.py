"""A MAMP peer the test switches on and off: POST /mamp/v1/messages answers
503 while it is down (as it starts) and 200 while it is up. Commands on
stdin, one a line: `up`, `down` (each acknowledged by {"switched": CMD}).

Prints `listening PORT`, then one JSON line per request:
{status, message_id, to, accepted}, `accepted` being how many POSTs of
that message_id it has answered 200 so far. Usage: python switch_peer.py
"""

import json
import sys
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
UP = threading.Event()
accepted = Counter()


class Peer(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        message = json.loads(body)
        message_id = message.get("message_id", "")
        with LOCK:
            if UP.is_set():
                accepted[message_id] += 1
                status = 200
                answer = {"conversation_id": f"switch-conv-{message_id}", "message_id": message_id, "status": "received"}
            else:
                status = 503
                answer = {"error": "service_unavailable", "message": "down for now", "status_code": 503}
            line = json.dumps({"status": status, "message_id": message_id, "to": message.get("to"), "accepted": accepted[message_id]})
            print(line, flush=True)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Peer)
    print("listening", server.server_address[1], flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for line in sys.stdin:
        cmd = line.strip()
        with LOCK:
            if cmd == "up":
                UP.set()
            elif cmd == "down":
                UP.clear()
            else:
                continue
            print(json.dumps({"switched": cmd}), flush=True)
    server.shutdown()


if __name__ == "__main__":
    main()
