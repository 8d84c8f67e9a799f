"""Progress of a long run: a bar on a terminal, plain lines in a log file.

On a terminal (stderr is a TTY) a tqdm bar shows the step, the rate and the time left, with the
figures an agent passes as its postfix. Elsewhere (output redirected to a file, a sweep's child, CI)
and with ``--no-progress-bar``, a plain line goes to stdout at the first update and then at most
every ``every`` seconds (``--progress-every``, 30 by default; 0 prints none), and one at the end::

    [progress] step 40,960/1,000,000 (4.1%) | SPS 1,234 | return 312.4 | elapsed 0:00:33 | left 0:12:57

Any agent calls :meth:`Progress.update` (through ``Run.progress``) with its own figures in
``extra``, e.g. ``{"tokens/s": 14.6, "success": 0.5, "rollout turn": "3/8"}``: numbers are printed
with 4 significant digits, strings as they are. Calling it again at the same step (work inside an
iteration) refreshes the figures without moving the step.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping


def format_duration(seconds: float) -> str:
    """``h:mm:ss``."""
    seconds = int(max(seconds, 0))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _format_value(value) -> str:
    if isinstance(value, str):
        return value
    value = float(value)
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


class Progress:
    """Step, rate, recent figures and time left of a run, as a bar on a terminal or as plain lines.

    Args:
        total: the step at which the run ends.
        initial: the step the run starts (or resumes) at.
        bar: draw a bar when stderr is a terminal (``--progress-bar``); otherwise plain lines.
        every: seconds between two plain lines (0: no lines).
    """

    def __init__(self, total: int, initial: int = 0, bar: bool = True, every: float = 30.0, unit: str = "step"):
        self.total, self.unit, self.every = total, unit, every
        self.step = initial
        self.fields: dict[str, str] = {}
        self._start = (time.monotonic(), initial)
        self._last_line: tuple[float, int] | None = None
        self.bar = None
        if bar and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit=unit, dynamic_ncols=True)

    def update(
        self,
        step: int,
        recent_return: float | None = None,
        sps: float | None = None,
        extra: Mapping[str, float | str] | None = None,
    ) -> None:
        """The run reached ``step``; ``sps``, ``recent_return`` and ``extra`` are the figures to show."""
        self.fields = {}
        if sps is not None:
            self.fields["SPS"] = f"{sps:,.0f}"
        if recent_return is not None:
            self.fields["return"] = f"{recent_return:.1f}"
        self.fields.update({name: _format_value(value) for name, value in (extra or {}).items()})
        if self.bar is not None:
            self.bar.update(step - self.bar.n)
            if self.fields:
                self.bar.set_postfix(self.fields, refresh=False)
        self.step = step
        now = time.monotonic()
        if self.bar is None and self.every > 0 and (self._last_line is None or now - self._last_line[0] >= self.every):
            self._print_line(now)

    def line(self, now: float | None = None) -> str:
        """The plain progress line for the current step."""
        now = time.monotonic() if now is None else now
        start_time, start_step = self._start
        elapsed = now - start_time
        parts = [f"{self.unit} {self.step:,}/{self.total:,} ({100 * self.step / max(self.total, 1):.1f}%)"]
        parts += [f"{name} {value}" for name, value in self.fields.items()]
        parts.append(f"elapsed {format_duration(elapsed)}")
        rate = (self.step - start_step) / elapsed if elapsed > 0 else 0.0
        if rate > 0:
            parts.append(f"left {format_duration((self.total - self.step) / rate)}")
        return "[progress] " + " | ".join(parts)

    def _print_line(self, now: float) -> None:
        print(self.line(now), flush=True)
        self._last_line = (now, self.step)

    def write(self, message: str) -> None:
        """Print a message without breaking the bar."""
        if self.bar is not None:
            self.bar.write(message)
        else:
            print(message, flush=True)

    def close(self) -> None:
        """End the bar (its line is done), or print the last step reached for the end of a log; once."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None  # what is written after goes on lines of its own
        elif self.every > 0 and self._last_line is not None and self._last_line[1] != self.step:
            self._print_line(time.monotonic())
        self.every = 0  # closed: no more plain lines
