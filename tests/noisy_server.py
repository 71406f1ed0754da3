"""A stand-in for `python serve.py` that logs heavily: an HTTP server on --server.address / --server.port
(the other options a harness passes are ignored) whose every request first logs NOISE bytes through the
``logging`` module to stderr (as Streamlit logs a warning with its traceback), then answers 200.

A harness that gives it a pipe nobody reads sees it stop answering once 64 KB are written; one that drains
or redirects its output sees every request answered (tests/test_server_harness.py)."""

from __future__ import annotations

import argparse
import http.server
import logging
import sys

NOISE = 128 * 1024  # bytes logged per request


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        logging.getLogger("noisy").warning("request %s\n%s", self.path, "x" * NOISE)
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
        pass


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--server.address", dest="address", default="127.0.0.1")
    p.add_argument("--server.port", dest="port", type=int, required=True)
    args, _ = p.parse_known_args()
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    http.server.ThreadingHTTPServer((args.address, args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
