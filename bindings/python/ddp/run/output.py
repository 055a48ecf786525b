# SPDX-FileCopyrightText: 2026 The libddp Authors
# SPDX-License-Identifier: Apache-2.0
"""ddprun's output: the ranks' streams cut into lines, prefixed with the rank, and copied to the
launcher's streams without two writers ever interleaving."""
from __future__ import annotations

import os
import re
import selectors
import subprocess
import threading
import time
import typing

# An agent's word to the launcher: a line of its stderr starting with this (never printed).
CONTROL = b"\x1eddprun "


def rank_prefix(rank: int, host: str = "") -> str:
    """What a rank's lines start with: "[3] " on one machine, "[host:3] " across hosts."""
    return f"[{host}:{rank}] " if host else f"[{rank}] "


def timestamp() -> bytes:
    """What --prefix-output-with-timestamp puts before a line: horovodrun's time (local,
    time.asctime's "Fri Nov 27 16:41:22 2026") and a space."""
    return time.asctime().encode() + b" "


class Sink:
    """A launcher output stream taking whole lines under one lock: no two writers interleave.
    STAMP: every line gets the time in front (--prefix-output-with-timestamp)."""

    def __init__(self, stream, stamp: bool = False):
        self._stream = stream
        self._stamp = stamp
        self._lock = threading.Lock()
        self._broken = False

    def write(self, lines: list[bytes]) -> bytes:
        """Writes LINES; returns the time put before each (b"" without STAMP)."""
        stamp = timestamp() if self._stamp and lines else b""
        with self._lock:
            if self._broken or not lines:
                return stamp
            try:
                for line in lines:
                    self._stream.write(stamp + line)
                self._stream.flush()
            except (OSError, ValueError):  # e.g. `ddprun ... | head`: keep draining the ranks
                self._broken = True
        return stamp


class RankFiles:
    """--output-filename DIR: each rank's stdout and stderr also in DIR/rank.N/stdout and
    DIR/rank.N/stderr, as horovodrun lays them out (N zero-padded to the width of the job's last
    rank, so that the folders sort in rank order). A file gets the rank's lines as the terminal
    shows them less the "[rank] " prefix (the time stays, with --prefix-output-with-timestamp)."""

    def __init__(self, directory: str, size: int, prefixes: dict[bytes, int]):
        """PREFIXES: the prefix of each rank this launcher shows ("[3] ", "[host:3] ")."""
        width = len(str(max(size - 1, 0)))
        self._files: dict[bytes, tuple] = {}
        self._lock = threading.Lock()
        try:
            for prefix, rank in prefixes.items():
                folder = os.path.join(directory, f"rank.{rank:0{width}d}")
                os.makedirs(folder, exist_ok=True)
                self._files[prefix] = tuple(open(os.path.join(folder, name), "wb")
                                            for name in ("stdout", "stderr"))
        except OSError:
            self.close()
            raise

    def write(self, stream: int, lines: list[bytes], stamp: bytes) -> None:
        """Lines of STREAM (0 stdout, 1 stderr), each starting with its rank's prefix."""
        with self._lock:
            touched = set()
            for line in lines:
                cut = line.find(b"] ") + 2
                files = self._files.get(line[:cut]) if cut > 1 else None
                if files is None:
                    continue
                try:
                    files[stream].write(stamp + line[cut:])
                    touched.add(files[stream])
                except (OSError, ValueError):
                    pass  # a full disk loses the copy, never the job
            for f in touched:
                try:
                    f.flush()
                except (OSError, ValueError):
                    pass

    def close(self) -> None:
        with self._lock:
            for files in self._files.values():
                for f in files:
                    try:
                        f.close()
                    except OSError:
                        pass


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

    def __init__(self, out: Sink, err: Sink, files: RankFiles | None = None):
        super().__init__(name="ddprun-output", daemon=True)
        self._selector = selectors.DefaultSelector()
        self._sinks = (out, err)
        self._files = files
        self._open: dict[int, int] = {}  # unit -> how many of its pipes are still open
        self._closed = threading.Condition()

    def add(self, unit: int, proc: subprocess.Popen, prefix: bytes, control=None,
            report: tuple | None = None) -> None:
        """Only before start(). CONTROL(line) takes the control lines of its stderr; REPORT, a
        (pipe, handler) pair, the lines of its libddp report pipe (handler(line), never shown)."""
        for stream, pipe, ctl in ((0, proc.stdout, None), (1, proc.stderr, control)):
            assert pipe is not None  # every unit is started with pipes for its output
            self._selector.register(pipe, selectors.EVENT_READ, (unit, Prefixer(prefix), stream,
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
        unit, prefixer, stream, control = key.data
        data = os.read(key.fd, 1 << 16)
        lines = prefixer.feed(data) if data else prefixer.close()
        if stream is None:  # a report pipe: every line goes to its handler
            for line in lines:
                control(line)
            lines = []
        elif control is not None:
            for line in [line for line in lines if line.startswith(CONTROL)]:
                control(line)
            lines = [line for line in lines if not line.startswith(CONTROL)]
        if lines:
            stamp = self._sinks[stream].write(lines)
            if self._files is not None:
                self._files.write(stream, lines, stamp)
        if not data:
            self._selector.unregister(key.fileobj)
            typing.cast(typing.IO[bytes], key.fileobj).close()  # every pipe is a file object
            with self._closed:
                self._open[unit] -= 1
                self._closed.notify_all()

    def wait_closed(self, unit: int, timeout: float) -> None:
        with self._closed:
            self._closed.wait_for(lambda: self._open.get(unit, 0) == 0, timeout)


def copy_lines(pipe, prefix: bytes, sink: Sink, files: RankFiles | None = None,
               stream: int = 0) -> None:
    """Copies one process's output (a restarted server's, an elastic worker's or its agent's),
    prefixed, until it closes, leaving out an agent's control lines. FILES gets them too, as
    STREAM (0 stdout, 1 stderr)."""
    prefixer = Prefixer(prefix)
    while True:
        data = os.read(pipe.fileno(), 1 << 16)
        lines = prefixer.feed(data) if data else prefixer.close()
        lines = [line for line in lines if not line.startswith(CONTROL)]
        stamp = sink.write(lines)
        if files is not None and lines:
            files.write(stream, lines, stamp)
        if not data:
            pipe.close()
            return
