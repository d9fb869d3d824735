"""Progress while a run goes: a live line per host on a terminal, plain lines otherwise."""

from __future__ import annotations

from typing import TextIO

from kubegpu.events import Event

_MARK = {"ok": "ok", "failed": "FAILED", "skipped": "skipped", "unreachable": "UNREACHABLE"}


class Progress:
    """An event callback that renders progress to a stream."""

    def __init__(self, stream: TextIO, *, live: bool) -> None:
        self.stream = stream
        self.live = live
        self._lines: dict[str, str] = {}
        self._drawn = 0
        self._play = ""

    def __call__(self, event: Event) -> None:
        if event.kind == "play_start" and event.play != self._play:
            self._play = event.play
            self._emit_fixed(f"PLAY {event.play}")
        elif event.kind == "host_task_start" and event.host:
            self._update(event.host, f"{event.host}: {event.task} ...")
        elif event.kind in _MARK and event.host:
            mark = "changed" if event.kind == "ok" and event.changed else _MARK[event.kind]
            if event.kind == "failed" and event.ignored:
                mark = "failed (ignored)"
            line = f"{event.host}: {event.task} -> {mark}"
            if event.kind in {"failed", "unreachable"} and event.message and not event.ignored:
                line += f": {' '.join(event.message.split())[:200]}"
            if self.live:
                self._update(event.host, line)
            else:
                self.stream.write(line + "\n")
                self.stream.flush()
        elif event.kind == "stats":
            self.finish()

    def _emit_fixed(self, text: str) -> None:
        if self.live:
            self._clear()
            self._lines.clear()
        self.stream.write(text + "\n")
        self.stream.flush()

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0

    def _update(self, host: str, line: str) -> None:
        if not self.live:
            return
        self._lines[host] = line
        self._clear()
        for host_name in sorted(self._lines):
            self.stream.write(self._lines[host_name][:160] + "\n")
        self._drawn = len(self._lines)
        self.stream.flush()

    def finish(self) -> None:
        # Leave the last state of every host on screen.
        self._drawn = 0
        self._lines.clear()
