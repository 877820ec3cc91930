"""An admin URL with credentials (``http://user:password@host:8080``) reaches the host
and sends them as HTTP basic authentication, as a browser or curl would: urllib took
``user:password@host`` for the host name, so such a URL could never work."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from pulsar_txn.admin import admin_request


def test_credentials_in_the_admin_url_are_sent_as_basic_auth_not_as_the_host():
    seen: dict = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen["auth"] = self.headers.get("Authorization")
            seen["path"] = self.path
            body = json.dumps({"ok": True}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://ops:p%40ss@127.0.0.1:{server.server_port}"
        assert admin_request(url, "GET", "/admin/v2/clusters", timeout=5) == {"ok": True}
    finally:
        server.shutdown()
    assert seen["path"] == "/admin/v2/clusters"
    assert seen["auth"] == "Basic " + base64.b64encode(b"ops:p@ss").decode()
