"""Bait for the SQL sandbox's tests (issue 28 §1): a local file and an HTTP server on
loopback, each holding a secret row, that record whether a query read them."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

SECRET = "SECRET-ROW"

#: An HTTP server in a process of its own (polars holds the GIL while it fetches, so a
#: server thread in this process would hang instead of failing the test), which appends
#: the path of every request it gets to a log file and answers with CSV rows.
SERVER = """
import http.server, sys
log = open(sys.argv[1], "a", buffering=1)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        log.write(self.command + " " + self.path + "\\n")
        body = b"a,n\\nSECRET-ROW,1\\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)
    do_HEAD = do_GET
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


class Bait:
    """A local CSV file and an HTTP server on loopback, each holding a secret row, that
    record what a query reads of them."""

    def __init__(self, root: Path) -> None:
        self.file = root / "secret.csv"
        self.file.write_text(f"a,n\n{SECRET},1\n")
        self.log = root / "http.log"
        self.log.write_text("")
        self.process = subprocess.Popen([sys.executable, "-c", SERVER, str(self.log)],
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        port = int(self.process.stdout.readline())
        self.url = f"http://127.0.0.1:{port}/secret.csv"
        with urllib.request.urlopen(self.url.replace("secret", "alive"), timeout=10):
            pass  # the server answers (and the probe is the one request it may log)

    @property
    def hits(self) -> list[str]:
        return [line for line in self.log.read_text().splitlines() if "alive" not in line]

    def payloads(self) -> list[str]:
        return [f"read_csv('{self.file}')", f"read_parquet('{self.url}')",
                f"read_csv('{self.url}')", f"READ_NDJSON('{self.url}')",
                f"\"read_json\"('{self.url}')", f"read_ipc ('{self.file}')"]

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
