"""Mini-batches of trajectory pieces for the Bayesian shooting methods on long recordings.

A fit of K pieces (single-shooting windows, `io.estimator_data`) lets each step see B of them,
so that the cost of a step does not grow with the length of the recording. Schedule: the
pieces in a random order, a new permutation per epoch, consumed B at a time; a batch that
runs past the end of a permutation continues with the next. So every piece is seen once in
every K consecutive draws, and each step's log-likelihood, scaled by K / B
(`ShootingLikelihood.batch_scale`), is an unbiased estimate of the whole recording's.
"""

from __future__ import annotations

import numpy as np

__all__ = ['AUTO_BATCH_PIECES', 'batch_pieces', 'PieceSchedule']

# Pieces per step under `estimator.batch: auto`: with the automatic windows (0.25-2 s) a step
# sees 2-16 s of data, whatever the recording's length.
AUTO_BATCH_PIECES = 8


def batch_pieces(setting, num_pieces: int) -> int:
    """B for `estimator.batch` (`auto`, `all` or a number of pieces) and K pieces: at most K."""
    if setting == 'all':
        return num_pieces
    wanted = AUTO_BATCH_PIECES if setting == 'auto' else int(setting)
    return min(wanted, num_pieces)


class PieceSchedule:
    """Indices of the pieces of each step (module doc), reproducible from `seed`."""

    def __init__(self, num_pieces: int, batch: int, seed: int):
        if not 1 <= batch <= num_pieces:
            raise ValueError(f'batch: expected 1 <= batch <= {num_pieces} pieces, got {batch}')
        self.num_pieces = num_pieces
        self.batch = batch
        self._rng = np.random.default_rng([seed, num_pieces, batch])
        self._queue = np.zeros(0, dtype=np.int64)

    def next_batch(self) -> np.ndarray:
        """(B,) piece indices of the next step (distinct unless the batch spans two
        permutations)."""
        if self._queue.size < self.batch:
            self._queue = np.concatenate([self._queue, self._rng.permutation(self.num_pieces)])
        index, self._queue = self._queue[:self.batch], self._queue[self.batch:]
        return index
