"""An OTLP/HTTP trace receiver that reads and drops every export: the far end of a traced
ResponseKit in `bench/gateway.py --with-traces`, so that the gateway's own cost of its spans
(made, batched, encoded, sent) is what is measured.

Run: `python bench/otlp_sink.py --port N`; the collector URL is `http://127.0.0.1:N`.
"""

from __future__ import annotations

import argparse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:  # the benchmark's readiness check
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    ThreadingHTTPServer(("127.0.0.1", parser.parse_args().port), Sink).serve_forever()


if __name__ == "__main__":
    main()
