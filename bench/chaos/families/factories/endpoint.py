"""The webhooks' endpoint under chaos: a local HTTP server in a process of its own (the run's
sidecar, never faulted) that answers 500 to a share of the deliveries at random and 200 to the
rest, and writes each answer to the run's ledger (`delivery`: the `webhook-id`, the status)
BEFORE it sends it, so every 2xx a sender may have seen is in the ledger.

    python -m bench.chaos.families.factories.endpoint --port P --seed S
"""

from __future__ import annotations

import argparse
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

from bench.chaos.ledger import note

#: The share of deliveries answered 500 (the sender retries them on its backoff).
FAIL_SHARE: Final = 0.2


class Endpoint(BaseHTTPRequestHandler):
    rng = random.Random(0)
    lock = threading.Lock()

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        event = self.headers.get("webhook-id") or ""
        with self.lock:
            status = 500 if self.rng.random() < FAIL_SHARE else 200
        note("delivery", event=event, status=status)
        self.send_response(status)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok" if status == 200 else b"no")

    def log_message(self, format: str, *args: object) -> None:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    Endpoint.rng = random.Random(a.seed)
    server = ThreadingHTTPServer(("127.0.0.1", a.port), Endpoint)
    server.daemon_threads = True
    print(f"endpoint listening on 127.0.0.1:{a.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
