"""The loop of estimator steps that a fit runs: progress reports, early stop, Ctrl-C.

`run_steps` calls `step(state) -> (state, info)` until the budget is spent or `converged(info)`
holds; a KeyboardInterrupt ends it cleanly with the last completed step. `BestSoFar` keeps
each particle row's lowest-loss parameters over the steps (a point estimator's result).
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple

import numpy as np

__all__ = ['BestSoFar', 'StepsResult', 'run_steps']


class BestSoFar:
    """Per particle row, the lowest loss seen so far and the parameters that had it.

    Attributes:
      theta: (P, M) parameters of each row's best step [physical units].
      loss: (P,) their loss (inf until a finite loss is seen).
    """

    def __init__(self, theta):
        self.theta = np.array(theta, dtype=float)
        self.loss = np.full(self.theta.shape[0], np.inf)

    def update(self, loss, theta) -> None:
        """Keep the rows of `theta` (P, M) whose `loss` (P,) beats the row's best (NaN never)."""
        loss = np.asarray(loss, dtype=float)
        improved = loss < self.loss
        self.loss = np.where(improved, loss, self.loss)
        self.theta[improved] = np.asarray(theta, dtype=float)[improved]

    def overall(self) -> tuple[np.ndarray, float]:
        """(M,) parameters and loss of the best row."""
        k = int(np.argmin(self.loss))
        return self.theta[k].copy(), float(self.loss[k])


class StepsResult(NamedTuple):
    """Outcome of `run_steps`.

    Attributes:
      state: the estimator state after the last completed step.
      info: what the last completed step returned (None if no step completed).
      history: (K,) the loss recorded at each completed step.
      interrupted: True if Ctrl-C (KeyboardInterrupt) stopped the loop.
    """

    state: Any
    info: Any
    history: np.ndarray
    interrupted: bool


def run_steps(step: Callable, state, iterations: int, record: Callable,
              progress: Callable | None = None, start: float | None = None,
              converged: Callable | None = None) -> StepsResult:
    """Run `iterations` estimator steps with progress reports; Ctrl-C stops them cleanly.

    Args:
      step: `step(state) -> (state, info)`, e.g. a jitted estimator step with its data bound.
      state: the initial state.
      iterations: most steps to take.
      record: `record(previous_state, state, info) -> loss` after each step: the loss of
        the history (and any best-so-far bookkeeping, e.g. `BestSoFar.update`).
      progress: called after each step as `progress(iteration, iterations, loss, elapsed_s)`.
      start: `time.perf_counter()` at which the elapsed time starts (default: now).
      converged: `converged(info) -> bool`; True stops the loop early.

    Returns:
      StepsResult. A KeyboardInterrupt, in a step or in `progress`, ends the loop with the
      state of the last completed step and `interrupted=True`.
    """
    start = time.perf_counter() if start is None else start
    history: list[float] = []
    info = None
    interrupted = False
    try:
        for k in range(iterations):
            new_state, new_info = step(state)
            history.append(float(record(state, new_state, new_info)))
            state, info = new_state, new_info
            if progress is not None:
                progress(k + 1, iterations, history[-1], time.perf_counter() - start)
            if converged is not None and converged(info):
                break
    except KeyboardInterrupt:
        interrupted = True
    return StepsResult(state=state, info=info, history=np.asarray(history, dtype=float),
                       interrupted=interrupted)
