"""A StatsD receiver on 127.0.0.1 (UDP), so metrics are tested over the real protocol: it
keeps every datagram's lines and parses InfluxDB-style tagged StatsD
(``name,tag=value,tag=value:value|type``), what Airflow's StatsD logger sends with
``statsd_influxdb_enabled``."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Metric:
    name: str
    value: float
    kind: str  # c (counter), ms (timer), g (gauge)
    tags: dict[str, str] = field(default_factory=dict)


class StatsdSink:
    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.lines: list[str] = []
        self._stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop:
            try:
                data, _ = self.sock.recvfrom(65535)
            except OSError:
                return
            self.lines.extend(data.decode(errors="replace").splitlines())

    def metrics(self, prefix: str = "") -> list[Metric]:
        out = []
        for line in list(self.lines):
            head, _, rest = line.partition(":")
            value, _, kind = rest.partition("|")
            name, *tags = head.split(",")
            if not name.startswith(prefix) or not kind:
                continue
            out.append(Metric(name, float(value), kind.split("|")[0],
                              dict(t.split("=", 1) for t in tags if "=" in t)))
        return out

    def stop(self) -> None:
        self._stop = True
        self.sock.close()
