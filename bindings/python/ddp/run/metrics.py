# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddprun --metrics-port: Prometheus metrics of every rank of the job, served by the launcher at
/metrics from what the ranks publish each second (run/monitor.py), in Prometheus' text format
0.0.4. Counters are the ranks' own since they started; a rank that stopped publishing keeps its
last figures and `ddp_rank_up` 0 (it last spoke over STALE_SECONDS ago)."""
from __future__ import annotations

import http.server
import threading
import time

from . import monitor

# The bus bandwidth factor of each operation (as nccl-tests define it): bytes on the busiest
# link per byte of the tensor, for n ranks.
_BUS = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
        "reducescatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
        "broadcast": lambda n: 1.0}
_COUNTERS = (
    ("ddp_operations_total", "operations", "Operations finished (OK or not), by rank and "
     "operation."),
    ("ddp_operation_errors_total", "errors", "Operations that failed."),
    ("ddp_bytes_total", "bytes", "Bytes of the tensors of operations that finished OK."),
    ("ddp_busy_seconds_total", "busy_seconds", "Seconds operations ran (agreed to finished)."),
    ("ddp_wait_seconds_total", "waiting_seconds", "Seconds operations waited for the other "
     "ranks to submit them (submitted to agreed)."),
)
STALE_SECONDS = 3.0


def _labels(**labels: object) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


class Collector:
    """The job's figures from the store: read at most once a second, whatever the scrapes."""

    def __init__(self, ranks_of):
        self._ranks_of = ranks_of  # monitor.Fixed, or monitor.Generations (an elastic job)
        self._lock = threading.Lock()
        self._last: dict[int, dict | None] = {}
        self._read_at = 0.0
        self._ranks, self._generation = 0, -1

    def figures(self) -> tuple[dict[int, dict | None], int, int]:
        """(each rank's status, how many ranks, the generation: -1 for a static job), of one
        read together."""
        with self._lock:
            now = time.monotonic()
            if now - self._read_at >= 1.0:
                self._read_at = now
                try:
                    client, ranks, generation = self._ranks_of.current()
                    last = monitor.read(client, ranks)
                    self._last, self._ranks, self._generation = last, ranks, generation
                except monitor.NoRanks:  # none formed yet, or the job is ending: no ranks
                    self._last, self._ranks = {}, 0
                except Exception:  # noqa: BLE001 - a store that does not answer this once
                    pass  # the last figures stand
            return dict(self._last), self._ranks, self._generation

    @staticmethod
    def up(status: dict | None) -> bool:
        """Whether a rank whose last status is STATUS spoke within STALE_SECONDS (by its clock:
        hosts' clocks agree to far better than that where NTP runs)."""
        return status is not None and time.time() - status["time_ns"] / 1e9 < STALE_SECONDS

    def render(self) -> str:
        statuses, n, generation = self.figures()
        lines: list[str] = []
        for name, field, help_text in _COUNTERS:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter"]
            for rank, s in sorted(statuses.items()):
                for op, t in sorted((s or {}).get("engine", {}).get("totals", {}).items()):
                    lines.append(f"{name}{_labels(rank=rank, op=op)} {t[field]}")
        lines += ["# HELP ddp_busbw_bytes_per_second Bus bandwidth of each operation since the "
                  "rank started (bytes x the operation's bus factor / busy seconds).",
                  "# TYPE ddp_busbw_bytes_per_second gauge"]
        for rank, s in sorted(statuses.items()):
            for op, t in sorted((s or {}).get("engine", {}).get("totals", {}).items()):
                if op in _BUS and t["busy_seconds"] > 0 and n > 1:
                    busbw = t["bytes"] * _BUS[op](n) / t["busy_seconds"]
                    lines.append(f"ddp_busbw_bytes_per_second{_labels(rank=rank, op=op)} {busbw}")
        lines += _per_rank(statuses, lambda rank: self.up(statuses.get(rank)))
        if generation >= 0:
            lines += ["# HELP ddp_elastic_generation The elastic job's generation whose ranks "
                      "these are (counters start again with each).",
                      "# TYPE ddp_elastic_generation gauge",
                      f"ddp_elastic_generation {generation}"]
        return "\n".join(lines) + "\n"


def _per_rank(statuses: dict[int, dict | None], up) -> list[str]:
    lines = ["# HELP ddp_waited_for_seconds_total How long the other ranks waited for this "
             "one (summed over them).", "# TYPE ddp_waited_for_seconds_total counter"]
    waited: dict[int, float] = {}
    for s in statuses.values():  # agreed: the same on every rank; the largest is the newest
        for rank, seconds, _ in (s or {}).get("engine", {}).get("waited_for", []):
            waited[rank] = max(waited.get(rank, 0.0), seconds)
    lines += [f"ddp_waited_for_seconds_total{_labels(rank=r)} {waited.get(r, 0.0)}"
              for r in sorted(statuses)]
    lines += ["# HELP ddp_in_flight_operations Operations submitted and not finished.",
              "# TYPE ddp_in_flight_operations gauge"]
    lines += [f"ddp_in_flight_operations{_labels(rank=r)} "
              f"{(s or {}).get('engine', {}).get('in_flight_count', 0)}"
              for r, s in sorted(statuses.items())]
    lines += ["# HELP ddp_job_broken 1 once an error broke the job on this rank.",
              "# TYPE ddp_job_broken gauge"]
    lines += [f"ddp_job_broken{_labels(rank=r)} "
              f"{int(bool((s or {}).get('engine', {}).get('error')))}"
              for r, s in sorted(statuses.items())]
    lines += ["# HELP ddp_rank_up 1 while the rank publishes its status (every second).",
              "# TYPE ddp_rank_up gauge"]
    lines += [f"ddp_rank_up{_labels(rank=r)} {int(up(r))}" for r in sorted(statuses)]
    return lines


class _Handler(http.server.BaseHTTPRequestHandler):
    collector: Collector

    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/metrics":
            self.send_error(404, "only /metrics is served")
            return
        body = self.server.collector.render().encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:  # no line per scrape on ddprun's stderr
        pass


class MetricsServer:
    """Binds PORT at once (a port in use fails ddprun before any rank starts); serves in a
    thread of its own until close()."""

    def __init__(self, port: int):
        self._server = http.server.ThreadingHTTPServer(("", port), _Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    def serve(self, ranks_of) -> None:
        """Serves the ranks RANKS_OF names (monitor.Fixed or monitor.Generations)."""
        self._server.collector = Collector(ranks_of)  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, name="ddprun-metrics",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
        self._server.server_close()
