"""Progress of the long steps inside one LLM training iteration: rollout turns and update micro-batches.

An iteration of a language-model agent on a CPU takes minutes, most of it in two loops: the
rollout (turn after turn of batched generation) and the passes over micro-batches (reference
log-probs, TurnSight's teacher, the gradient steps). Each loop is a *stage*:

    progress = WorkProgress(bar=args.progress_bar)
    progress.prefix = f"iteration {iteration}/{total}"
    with progress.stage("update", total=len(micro_batches), unit="micro-batch") as stage:
        for k, batch in enumerate(micro_batches, 1):
            ...
            stage.update(k)

On a terminal each stage is a transient progress bar (``bar=False`` turns it off). Otherwise (a
log file, a sweep, CI) a plain line is printed about every ``interval_s`` seconds, with the
stage, how far it is, its rate and, when its length is known, the time left; a background timer
prints it even while one unit of work (a micro-batch on a busy CPU) takes longer than that.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO


class Stage:
    """One loop of an iteration, reported through its :class:`WorkProgress`."""

    def __init__(self, owner: WorkProgress, name: str, total: int | None, unit: str) -> None:
        self.owner, self.name, self.total, self.unit = owner, name, total, unit
        self.started = time.monotonic()
        self.done = 0
        self.info: dict[str, Any] = {}
        self._bar: Any = None
        if owner.use_bar:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=f"{owner.prefix} {name}".strip(), unit=unit, leave=False, dynamic_ncols=True)
        owner.current = self

    def update(self, done: int, **info: Any) -> None:
        """``done`` units finished so far; ``info`` (e.g. ``tokens_per_s=12.5``) is shown beside them."""
        self.done, self.info = done, info
        if self._bar is not None:
            self._bar.update(done - self._bar.n)
            if info:
                self._bar.set_postfix({k: _fmt(v) for k, v in info.items()}, refresh=False)
        if self.owner.use_lines and time.monotonic() - self.owner.last_line >= self.owner.interval_s:
            self.owner.line(self.describe(info))

    def describe(self, info: dict[str, Any] | None = None) -> str:
        info = self.info if info is None else info
        elapsed = time.monotonic() - self.started
        of = f"/{self.total}" if self.total else ""
        parts = [f"{self.owner.prefix} {self.name}: {self.done}{of} {self.unit}".strip()]
        parts += [f"{k.replace('_', ' ')} {_fmt(v)}" for k, v in info.items()]
        parts.append(f"{elapsed:.0f} s elapsed")
        if self.total and self.done:
            parts.append(f"~{elapsed * (self.total - self.done) / self.done:.0f} s left")
        return ", ".join(parts)

    def close(self) -> None:
        if self.owner.current is self:
            self.owner.current = None
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Stage:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class WorkProgress:
    """Bars on a terminal, plain lines elsewhere, for the stages of an iteration.

    Args:
        bar: Show bars when ``stream`` is a terminal.
        interval_s: Least time between two plain lines.
        stream: Where lines go (default stdout); bars go to stderr as tqdm's do.
        enabled: False reports nothing at all.
        timer: With lines, also print the current stage from a background thread when
            ``interval_s`` has passed without an update.
    """

    def __init__(
        self,
        bar: bool = True,
        interval_s: float = 30.0,
        stream: TextIO | None = None,
        enabled: bool = True,
        timer: bool = True,
    ) -> None:
        self.stream = stream if stream is not None else sys.stdout
        terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        self.use_bar = enabled and bar and terminal
        self.use_lines = enabled and not terminal
        self.interval_s = interval_s
        self.prefix = ""
        self.current: Stage | None = None
        self.last_line = time.monotonic()
        self._lock = threading.Lock()
        if self.use_lines and timer and interval_s > 0:
            threading.Thread(target=self._timer, name="progress-lines", daemon=True).start()

    def stage(self, name: str, total: int | None = None, unit: str = "step") -> Stage:
        return Stage(self, name, total, unit)

    def line(self, text: str) -> None:
        with self._lock:
            print(text, file=self.stream, flush=True)
            self.last_line = time.monotonic()

    def _timer(self) -> None:
        while True:
            time.sleep(min(self.interval_s, 5.0))
            stage = self.current
            if stage is not None and time.monotonic() - self.last_line >= self.interval_s:
                self.line(stage.describe())


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value)
