"""Progress of long loops: tqdm's bar on a terminal, periodic plain lines in a log file.

The workflow scripts redirect ``sys.stderr`` into the rule's log file. tqdm would write one carriage-return
update per step there (a 60-epoch training became one 50 kB line), so when the stream is not a terminal
:func:`progress` writes complete lines instead, e.g. ``backbone: epoch 12/60 (20%) loss=0.12 val_rmse=0.31
[4.2 s]``, at most one per ``every_percent`` of the total (and at least every ``every_seconds`` while the loop
runs), plus one at the end.

    for epoch in (bar := progress(range(60), desc="backbone", unit="epoch")):
        ...
        bar.set_postfix(val_rmse=f"{rmse:.3g}")
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any

__all__ = ["progress", "LineProgress"]


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class LineProgress:
    """Iterate over ``iterable`` and write plain progress lines to ``file`` (no carriage returns).

    A line is written after item ``n`` completes when ``n`` crosses the next multiple of ``every_percent`` % of
    ``total``, or when ``every_seconds`` have passed since the last line; and once when the loop ends (exhausted
    or :meth:`close`), unless the last line already showed the final count. Without a known ``total`` only the
    time rule and the final line apply. Lines: ``<desc>: [<unit> ]<n>/<total> (<pct>%) <postfix> [<s> s]``.
    """

    def __init__(
        self,
        iterable: Iterable[Any],
        *,
        desc: str = "",
        total: int | None = None,
        unit: str = "it",
        file: IO[str] | None = None,
        every_percent: float = 10.0,
        every_seconds: float = 30.0,
        clock: Any = time.monotonic,
    ):
        if not 0 < every_percent <= 100:
            raise ValueError(f"every_percent must be in (0, 100], got {every_percent}")
        if every_seconds <= 0:
            raise ValueError(f"every_seconds must be positive, got {every_seconds}")
        self.iterable = iterable
        if total is None:
            try:
                total = len(iterable)  # type: ignore[arg-type]
            except TypeError:
                total = None
        self.total = total
        self.desc = desc
        self.unit = unit
        self.file = file
        self.every_percent = float(every_percent)
        self.every_seconds = float(every_seconds)
        self._clock = clock
        self._start = clock()
        self._last_time = self._start
        self._last_n = 0  # count shown by the last line
        self._next_pct = self.every_percent
        self._postfix = ""
        self.n = 0  # items handed out; all but the last are complete while the loop body runs
        self._closed = False

    def __len__(self) -> int:
        if self.total is None:
            raise TypeError("LineProgress over an iterable without a length")
        return self.total

    def __iter__(self) -> Iterator[Any]:
        for item in self.iterable:
            if self.n:
                self._completed(self.n)
            self.n += 1
            yield item
        self.close()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def set_postfix(self, ordered_dict: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """Values shown after the count in the next line (``key=value``), like tqdm's ``set_postfix``."""
        items = {**(ordered_dict or {}), **kwargs}
        self._postfix = " ".join(f"{k}={v}" for k, v in items.items())

    def close(self) -> None:
        """Write the final line (all handed-out items count as complete) unless it was written already."""
        if self._closed:
            return
        self._closed = True
        if self.n != self._last_n or self.n == 0:
            self._write(self.n)

    def _completed(self, n: int) -> None:
        now = self._clock()
        due = now - self._last_time >= self.every_seconds
        if self.total:
            pct = 100.0 * n / self.total
            if pct + 1e-9 >= self._next_pct:
                due = True
                while self._next_pct <= pct + 1e-9:
                    self._next_pct += self.every_percent
        if due:
            self._write(n, now)

    def _write(self, n: int, now: float | None = None) -> None:
        now = self._clock() if now is None else now
        count = f"{n}/{self.total} ({100.0 * n / self.total:.0f}%)" if self.total else f"{n}"
        unit = f"{self.unit} " if self.unit and self.unit != "it" else ""
        head = f"{self.desc}: " if self.desc else ""
        post = f" {self._postfix}" if self._postfix else ""
        stream = self.file if self.file is not None else sys.stderr
        print(f"{head}{unit}{count}{post} [{now - self._start:.1f} s]", file=stream, flush=True)
        self._last_time = now
        self._last_n = n


def progress(
    iterable: Iterable[Any],
    *,
    desc: str = "",
    total: int | None = None,
    unit: str = "it",
    disable: bool = False,
    leave: bool = False,
    file: IO[str] | None = None,
    every_percent: float = 10.0,
    every_seconds: float = 30.0,
) -> Any:
    """Wrap ``iterable`` with progress output to ``file`` (default: the current ``sys.stderr``).

    A terminal gets tqdm's bar (``leave`` as in tqdm); any other stream (a log file) gets a :class:`LineProgress`.
    ``disable=True`` writes nothing. The result iterates like ``iterable`` and has ``set_postfix`` and ``close``.
    """
    stream = file if file is not None else sys.stderr
    if disable or _isatty(stream):
        from tqdm.auto import tqdm

        return tqdm(iterable, desc=desc, total=total, unit=unit, disable=disable, leave=leave, file=stream)
    return LineProgress(iterable, desc=desc, total=total, unit=unit, file=stream, every_percent=every_percent,
                        every_seconds=every_seconds)  # fmt: skip
