"""ddprun's output: the ranks' streams cut into lines, prefixed with the rank, and copied to the
launcher's streams without two writers ever interleaving."""
from __future__ import annotations

import os
import re
import selectors
import subprocess
import threading

# An agent's word to the launcher: a line of its stderr starting with this (never printed).
CONTROL = b"\x1eddprun "


class Sink:
    """A launcher output stream taking whole lines under one lock: no two writers interleave."""

    def __init__(self, stream):
        self._stream = stream
        self._lock = threading.Lock()
        self._broken = False

    def write(self, lines: list[bytes]) -> None:
        with self._lock:
            if self._broken or not lines:
                return
            try:
                for line in lines:
                    self._stream.write(line)
                self._stream.flush()
            except (OSError, ValueError):  # e.g. `ddprun ... | head`: keep draining the ranks
                self._broken = True


_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)")


class Prefixer:
    """Cuts one stream of a rank into lines ending in "\\n", "\\r" or "\\r\\n", each prefixed with
    PREFIX. A "\\r" ends a line too, so a redrawn progress bar is shown as it is drawn."""

    def __init__(self, prefix: bytes):
        self._prefix = prefix
        self._partial: list[bytes] = []
        self._after_cr = False

    def feed(self, data: bytes) -> list[bytes]:
        lines = []
        if self._after_cr and data.startswith(b"\n"):  # the rest of a "\r\n" cut by a read
            lines.append(b"\n")
            data = data[1:]
        self._after_cr = False
        cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        if cut == 0:
            if data:
                self._partial.append(data)
            return lines
        head = b"".join(self._partial) + data[:cut]
        self._partial = [data[cut:]] if cut < len(data) else []
        lines.extend(self._prefix + line for line in _LINE.findall(head))
        self._after_cr = not self._partial and data.endswith(b"\r")
        return lines

    def close(self) -> list[bytes]:
        """The unterminated rest, ended with a newline so the next rank's line starts clean."""
        rest, self._partial = b"".join(self._partial), []
        return [self._prefix + rest + b"\n"] if rest else []


class OutputPump(threading.Thread):
    """Copies the output of every process the launcher started to the launcher's, line by line,
    prefixed; an agent's lines come prefixed already, and its control lines become events."""

    def __init__(self, out: Sink, err: Sink):
        super().__init__(name="ddprun-output", daemon=True)
        self._selector = selectors.DefaultSelector()
        self._sinks = (out, err)
        self._open: dict[int, int] = {}  # unit -> how many of its pipes are still open
        self._closed = threading.Condition()

    def add(self, unit: int, proc: subprocess.Popen, prefix: bytes, control=None,
            report: tuple | None = None) -> None:
        """Only before start(). CONTROL(line) takes the control lines of its stderr; REPORT, a
        (pipe, handler) pair, the lines of its libddp report pipe (handler(line), never shown)."""
        for pipe, sink, ctl in ((proc.stdout, self._sinks[0], None),
                                (proc.stderr, self._sinks[1], control)):
            self._selector.register(pipe, selectors.EVENT_READ, (unit, Prefixer(prefix), sink,
                                                                 ctl))
        self._open[unit] = 2
        if report is not None:
            pipe, handler = report
            self._selector.register(pipe, selectors.EVENT_READ, (unit, Prefixer(b""), None,
                                                                 handler))
            self._open[unit] = 3

    def run(self) -> None:
        while self._selector.get_map():
            for key, _ in self._selector.select():
                self._read(key)

    def _read(self, key: selectors.SelectorKey) -> None:
        unit, prefixer, sink, control = key.data
        data = os.read(key.fd, 1 << 16)
        lines = prefixer.feed(data) if data else prefixer.close()
        if sink is None:  # a report pipe: every line goes to its handler
            for line in lines:
                control(line)
            lines = []
        elif control is not None:
            for line in [line for line in lines if line.startswith(CONTROL)]:
                control(line)
            lines = [line for line in lines if not line.startswith(CONTROL)]
        if lines:
            sink.write(lines)
        if not data:
            self._selector.unregister(key.fileobj)
            key.fileobj.close()
            with self._closed:
                self._open[unit] -= 1
                self._closed.notify_all()

    def wait_closed(self, unit: int, timeout: float) -> None:
        with self._closed:
            self._closed.wait_for(lambda: self._open.get(unit, 0) == 0, timeout)


def copy_lines(pipe, prefix: bytes, sink: Sink) -> None:
    """Copies one process's output (a restarted server's, an elastic worker's or its agent's),
    prefixed, until it closes, leaving out an agent's control lines."""
    prefixer = Prefixer(prefix)
    while True:
        data = os.read(pipe.fileno(), 1 << 16)
        lines = prefixer.feed(data) if data else prefixer.close()
        sink.write([line for line in lines if not line.startswith(CONTROL)])
        if not data:
            pipe.close()
            return
