"""Host-side checks of a kernel's arguments, run once before anything is compiled; each
error names the method and the argument."""

from __future__ import annotations

import numpy as np

__all__ = ['check_positions', 'check_count', 'check_positive']


def check_positions(method: str, positions, num: int | None, what: str) -> np.ndarray:
    """Positions (num, D) of finite floats (any row count for `num=None`) as a NumPy copy;
    `what` names the rows in the message (e.g. 'C chains').

    Raises:
      ValueError: another shape, or NaN / inf entries.
    """
    positions = np.asarray(positions, dtype=float)
    if positions.ndim != 2 or positions.shape[0] < 1 or positions.shape[1] < 1:
        raise ValueError(f'{method}: positions: expected ({what}, D), got {positions.shape}')
    if num is not None and positions.shape[0] != num:
        raise ValueError(f'{method}: positions: expected {num} rows ({what}), got '
                         f'{positions.shape[0]}')
    if not np.all(np.isfinite(positions)):
        raise ValueError(f'{method}: positions hold NaN or inf')
    return positions


def check_count(method: str, name: str, value, minimum: int = 1) -> int:
    """`value` as an int >= `minimum` (a bool is no count).

    Raises:
      ValueError: not an integer, or below `minimum`.
    """
    if isinstance(value, bool) or int(value) != value or value < minimum:
        raise ValueError(f'{method}: {name}: expected int >= {minimum}, got {value!r}')
    return int(value)


def check_positive(method: str, name: str, value) -> None:
    """Raise ValueError unless every entry of `value` is > 0."""
    if not np.all(np.asarray(value, dtype=float) > 0.0):
        raise ValueError(f'{method}: {name}: expected > 0, got {value!r}')
