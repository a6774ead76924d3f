"""A progress bar for long commands, on a terminal only: quiet when piped or redirected.

    with Progress("verifying", total=events, stream=sys.stderr) as bar:
        for event in bar.track(events):
            ...

It redraws one line on stderr at most five times a second: a bar, the count done of the
total, and the time left at the rate so far. When the stream is not a terminal (a pipe, a
file, CI, cron) it writes nothing at all, so logs and scripts see only what the command
prints on purpose.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TextIO, TypeVar

T = TypeVar("T")
WIDTH = 24


def is_terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):
        return False


class Progress:
    def __init__(
        self, label: str, total: int | None, stream: TextIO | None = None, every_s: float = 0.2
    ):
        """``total`` None: not known in advance (the count so far and the rate instead)."""
        self.label = label
        self.total = None if total is None else max(int(total), 0)
        self.stream = stream if stream is not None else sys.stderr
        self.on = is_terminal(self.stream)
        self.every_s = every_s
        self.done = 0
        self.started = time.monotonic()
        self._drawn = 0.0

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.on and time.monotonic() - self._drawn >= self.every_s:
            self._draw()

    @contextmanager
    def ticking(self) -> Iterator[None]:
        """Redraw while one long step blocks (an upstream starting up), so the time shown moves."""
        if not self.on:
            yield
            return
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(self.every_s or 0.2):
                self._draw()

        ticker = threading.Thread(target=tick, name="progress", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()

    def track(self, items: Iterable[T]) -> Iterator[T]:
        for item in items:
            yield item
            self.advance()

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        if self.total is None and not self.done:
            return f"{self.label} ({_duration(elapsed)})"
        if self.total is None:
            rate = f", {self.done / elapsed:,.0f}/s" if elapsed > 0.5 else ""
            return f"{self.label}: {self.done:,} so far{rate} ({_duration(elapsed)})"
        total = max(self.total, self.done)
        share = self.done / total if total else 1.0
        filled = int(share * WIDTH)
        if self.done and total > self.done:
            left = f"{_duration(elapsed / self.done * (total - self.done))} left"
        elif total and self.done >= total:
            left = f"done in {_duration(elapsed)}"
        else:
            left = ""
        bar = "#" * filled + "." * (WIDTH - filled)
        return f"{self.label} [{bar}] {self.done:,}/{total:,} {share:4.0%} {left}".rstrip()

    def _draw(self) -> None:
        self._drawn = time.monotonic()
        self.stream.write("\r" + self.line() + "\x1b[K")
        self.stream.flush()

    def close(self) -> None:
        if self.on:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
            self.on = False


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"
