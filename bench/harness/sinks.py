"""Local alert sinks: a webhook (HTTP) receiver and an SMTP server on 127.0.0.1, so alert
delivery is tested over the real protocols instead of with mocks."""

from __future__ import annotations

import json
import threading
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller

from bench.harness.airflow_standalone import free_port


class WebhookSink:
    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                sink.received.append({"path": self.path, "json": json.loads(body or b"{}")})
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()


class SmtpSink:
    def __init__(self) -> None:
        self.messages: list[Any] = []
        sink = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):  # noqa: N802
                sink.messages.append(message_from_bytes(envelope.content))
                return "250 OK"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)
        self.controller.start()

    def conn_json(self) -> str:
        return json.dumps({"conn_type": "smtp", "host": "127.0.0.1", "port": self.port,
                           "extra": {"disable_ssl": True, "disable_tls": True,
                                     "retry_limit": 1, "timeout": 10}})

    def stop(self) -> None:
        self.controller.stop()
