#!/usr/bin/env python3
"""A remote cache in the Bazel HTTP layout for a machine without nginx (a lent GPU host).

    python3 bench/http_cache.py DIR PORT_FILE

Serves GET, HEAD and PUT of `/<anything>/<name>` from DIR on 127.0.0.1, on a free port that it
writes to PORT_FILE once it listens. A PUT lands in a temp file first and is renamed into place,
so a reader never sees half an entry. It stops on SIGTERM. Only for figures and device checks:
the tests use nginx's WebDAV, as a team would.
"""

import http.server
import os
import signal
import sys
import tempfile

ROOT = ""


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def entry(self):
        parts = [p for p in self.path.split("?")[0].split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            return None
        return os.path.join(ROOT, *parts)

    def reply(self, code, body=b""):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        path = self.entry()
        if path is None or not os.path.isfile(path):
            return self.reply(404)
        with open(path, "rb") as f:
            self.reply(200, f.read())

    do_HEAD = do_GET

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                chunk = self.rfile.read(size + 2)[:size]
                if size == 0:
                    return data
                data += chunk
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def do_PUT(self):
        path = self.entry()
        data = self.body()
        if path is None:
            return self.reply(400)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        self.reply(201)


def main():
    global ROOT
    if len(sys.argv) != 3:
        sys.exit("usage: http_cache.py DIR PORT_FILE")
    ROOT = os.path.abspath(sys.argv[1])
    os.makedirs(ROOT, exist_ok=True)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    with open(sys.argv[2] + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(sys.argv[2] + ".tmp", sys.argv[2])
    server.serve_forever()


if __name__ == "__main__":
    main()
