"""Captures OTLP/HTTP request bodies, to seed fuzz/corpus with real requests.

    python3 fuzz/capture.py 14999 /tmp/bodies &
    cd tests/python && $VENV/bin/python agent_scenario.py --transport http \
        --endpoint http://127.0.0.1:14999 --conversation-id c1   # and the other *_scenario.py
    python3 fuzz/capture.py --to-corpus /tmp/bodies

Every POST body is saved as <dir>/<n>-<path>-<json|proto>-<encoding>.bin and answered 200 with
an empty export response. --to-corpus writes each trace request into the corpus of the
span-based targets ("P" + protobuf) and otlp_http_decode (3 header bytes + body), each logs
request likewise ("L" + protobuf), named by the first 8 bytes of their SHA-256 in hex, as
the engine names inputs.
"""
import glob
import hashlib
import http.server
import itertools
import os
import sys

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, data):
    directory = os.path.join(CORPUS, target)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, hashlib.sha256(data).hexdigest()[:16])
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(data)


def to_corpus(directory):
    for name in sorted(glob.glob(os.path.join(directory, "*-proto-identity.bin"))):
        with open(name, "rb") as f:
            body = f.read()
        if "_traces-" in name:
            put("otlp_http_decode", bytes([0, 0, 0]) + body)
            for target in ("attributes", "interpret_span", "ingest"):
                put(target, b"P" + body)
        elif "_logs-" in name:
            put("otlp_http_decode", bytes([0, 0, 1]) + body)
            for target in ("interpret_log", "ingest"):
                put(target, b"L" + body)


def serve(port, out):
    os.makedirs(out, exist_ok=True)
    counter = itertools.count()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            kind = "json" if "json" in (self.headers.get("Content-Type") or "") else "proto"
            encoding = self.headers.get("Content-Encoding") or "identity"
            path = self.path.strip("/").replace("/", "_")
            with open(os.path.join(out, f"{next(counter):04d}-{path}-{kind}-{encoding}.bin"), "wb") as f:
                f.write(body)
            answer = b"{}" if kind == "json" else b""
            self.send_response(200)
            self.send_header("Content-Type", "application/json" if kind == "json" else "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    if sys.argv[1] == "--to-corpus":
        to_corpus(sys.argv[2])
    else:
        serve(int(sys.argv[1]), sys.argv[2])
