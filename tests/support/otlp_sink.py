"""An OpenTelemetry metrics receiver on 127.0.0.1 (OTLP over HTTP, protobuf), so metrics
are tested over the real protocol: it decodes every ExportMetricsServiceRequest with the
OpenTelemetry protocol's own messages and keeps each data point."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Point:
    name: str
    kind: str  # sum | gauge | histogram
    value: float  # a sum's or gauge's value; a histogram's sum
    count: int  # a histogram's count (1 for the others)
    attributes: dict[str, str] = field(default_factory=dict)


class OtlpSink:
    def __init__(self) -> None:
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2

        self.points: list[Point] = []
        self.requests = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                req = metrics_service_pb2.ExportMetricsServiceRequest()
                req.ParseFromString(body)
                sink.requests += 1
                sink.points.extend(_points(req))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()
                self.wfile.write(metrics_service_pb2.ExportMetricsServiceResponse()
                                 .SerializeToString())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}/v1/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def named(self, prefix: str) -> list[Point]:
        return [p for p in list(self.points) if p.name.startswith(prefix)]

    def stop(self) -> None:
        self.server.shutdown()


def _attrs(kvs: Any) -> dict[str, str]:
    out = {}
    for kv in kvs:
        v = kv.value
        out[kv.key] = str(getattr(v, v.WhichOneof("value"))) if v.WhichOneof("value") else ""
    return out


def _points(req: Any) -> list[Point]:
    out = []
    for rm in req.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                data = getattr(m, kind)
                for dp in data.data_points:
                    if kind in ("sum", "gauge"):
                        value = dp.as_double if dp.WhichOneof("value") == "as_double" \
                            else float(dp.as_int)
                        out.append(Point(m.name, kind, value, 1, _attrs(dp.attributes)))
                    else:  # histogram, exponential_histogram
                        out.append(Point(m.name, "histogram", dp.sum, dp.count,
                                         _attrs(dp.attributes)))
    return out
