"""Progress of long loops on stderr, through tqdm.

On a terminal a tqdm bar redraws in place (count, rate, elapsed time, ETA, the latest loss).
Elsewhere (a log file, CI, a pipe) tqdm stays quiet (`disable=None`) and a plain line, in
tqdm's format, is written every 10 % of the steps (LOG_LINES) instead, so that a log still shows
that a long fit is alive. The ETA of those lines leaves out the first step, which includes
compilation.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Callable, Iterator, TextIO

from tqdm import tqdm

__all__ = ['LOG_LINES', 'progress_bar']

# Plain progress lines of one loop when not on a terminal (one per 1 / LOG_LINES of it).
LOG_LINES = 10
_LOG_FORMAT = '{desc}: {n_fmt}/{total_fmt} {unit} [elapsed {elapsed}, ETA {remaining}]{postfix}'
_FIRST_LOG_FORMAT = '{desc}: {n_fmt}/{total_fmt} {unit} [elapsed {elapsed}]{postfix}'


class _Lines:
    """Plain progress lines, one per 1 / LOG_LINES of the loop and one for its last step."""

    def __init__(self, label: str, unit: str, stream: TextIO):
        self.label, self.unit, self.stream = label, unit, stream
        self.first: tuple[int, float] | None = None     # (done, elapsed) of the first step
        self.share = -1                                 # LOG_LINES * done // total, written
        self.pending: tuple | None = None               # the latest step, if not written

    def report(self, done: int, total: int, postfix: str, elapsed: float) -> None:
        if self.first is None:
            self.first = (done, elapsed)
        share = LOG_LINES * done // max(total, 1)
        self.pending = (done, total, postfix, elapsed)
        if share != self.share or done == total:
            self.share = share
            self.flush()

    def flush(self) -> None:
        """Write the latest step's line, unless it is written already."""
        if self.pending is None:
            return
        done, total, postfix, elapsed = self.pending
        done_first, elapsed_first = self.first
        rate = ((done - done_first) / (elapsed - elapsed_first)
                if done > done_first and elapsed > elapsed_first else None)
        self.stream.write(tqdm.format_meter(
            done, total, elapsed, prefix=self.label, unit=self.unit, rate=rate,
            postfix=postfix, bar_format=_LOG_FORMAT if rate else _FIRST_LOG_FORMAT) + '\n')
        self.stream.flush()
        self.pending = None


@contextlib.contextmanager
def progress_bar(label: str, unit: str = 'it', stream: TextIO | None = None
                 ) -> Iterator[Callable[..., None]]:
    """A progress reporter for one loop (stderr by default), closed on exit.

    Yields:
      `report(done, total, loss=None, elapsed=None)`: call after each step with the steps
      done so far, their total, optionally the latest loss [-] and the seconds since the
      loop began (default: since entering the context). It fits the `progress` argument of
      `pipeline.fit` (`progress(iteration, total, loss, elapsed_s)`).
    """
    stream = sys.stderr if stream is None else stream
    start = time.perf_counter()
    # `delay`: nothing is drawn before the first report, which brings the total.
    bar = tqdm(desc=label, unit=unit, file=stream, disable=None, dynamic_ncols=True,
               delay=1e-9)
    lines = _Lines(label, unit, stream) if bar.disable else None

    def report(done: int, total: int, loss: float | None = None,
               elapsed: float | None = None) -> None:
        if lines is not None:
            elapsed = time.perf_counter() - start if elapsed is None else elapsed
            lines.report(done, total, '' if loss is None else f'loss {loss:.4e}', elapsed)
            return
        bar.total = total
        if loss is not None:
            bar.set_postfix(loss=f'{loss:.4e}', refresh=False)
        bar.update(done - bar.n)

    try:
        yield report
    finally:
        bar.close()
        if lines is not None:
            lines.flush()
