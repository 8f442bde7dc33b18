"""A held payload's estimate as a robot takes it, and the gate it must pass first.

The estimate (`held_payload`) is the `payload.*` parameters of a window's posterior: a rigid
body (mass, centre of mass, inertia about it) in the frame of `model.payload.link`. A robot
wants it in its own payload frame (Franka: the flange, UR: `tool0`;
`drivers.DriverProfile.payload_frame`), which `expressed_in` moves it to. `refusals` is the
gate: an estimate is handed to a robot only when it is converged (its mean steady over the
last windows), certain (standard deviations below the limits), a real body (its inertia) and
inside its bounds, not on them.
"""

from __future__ import annotations

import fnmatch
from typing import NamedTuple, Sequence

import numpy as np
import pinocchio as pin

from sysid_ros.core.model.inertia import (inertia_entries, inertia_matrix_from_entries,
                                          is_inertia_consistent)
from sysid_ros.core.model.parameters import PAYLOAD, PAYLOAD_ATTRIBUTES
from sysid_ros.io.model_io import frame_in_body, ModelError

__all__ = ['HeldPayload', 'GateLimits', 'held_payload', 'payload_bounds', 'robot_frame',
           'frame_offset', 'expressed_in',
           'SteadyMean', 'on_or_outside_bounds', 'refusals', 'CHANGE_STDS']

_NAMES = tuple(f'{PAYLOAD}.{attribute}' for attribute in PAYLOAD_ATTRIBUTES)
# How many mass stds a picked-up or put-down load must differ from the previous one by.
CHANGE_STDS = 2.0
# An estimate within this fraction of its bounds' width from a bound is "on" the bound.
_ON_BOUND = 0.01


class HeldPayload(NamedTuple):
    """A payload estimate in one frame.

    Attributes:
      frame: the frame of `com` and `inertia`.
      mass, mass_std: [kg].
      com, com_std: (3,) centre of mass and its standard deviations [m], in `frame`.
      inertia: (3, 3) inertia about the centre of mass [kg m^2], in `frame` axes (zero for a
        point mass).
    """

    frame: str
    mass: float
    mass_std: float
    com: np.ndarray
    com_std: np.ndarray
    inertia: np.ndarray


class GateLimits(NamedTuple):
    """What an estimate must meet before it is handed to a robot.

    Attributes:
      max_mass_std: largest mass standard deviation [kg].
      max_com_std: largest standard deviation of each centre-of-mass coordinate [m].
      steady_windows: windows whose means must all lie within one standard deviation of the
        latest (`SteadyMean`).
    """

    max_mass_std: float
    max_com_std: float
    steady_windows: int


def held_payload(names: Sequence[str], mean, std, frame: str,
                 nominal: Sequence[float]) -> HeldPayload | None:
    """The payload of one posterior, in `model.payload.link`'s frame `frame`.

    Args:
      names: (M,) parameter names.
      mean, std: (M,) posterior means and standard deviations [physical units].
      frame: the payload link.
      nominal: (10,) the configuration's payload in PAYLOAD_ATTRIBUTES order (mass [kg],
        centre of mass (3,) [m], inertia entries (6,) [kg m^2]), for the attributes that are
        not identified (their std is 0).

    Returns:
      None where no `payload.*` parameter is identified.
    """
    index = {name: k for k, name in enumerate(names)}
    if not any(name in index for name in _NAMES):
        return None
    if len(nominal) != len(_NAMES):
        raise ValueError(f'held_payload: nominal: expected {len(_NAMES)} values '
                         f'({", ".join(PAYLOAD_ATTRIBUTES)}), got {len(nominal)}')
    value = [float(mean[index[n]]) if n in index else float(v) for n, v in zip(_NAMES, nominal)]
    spread = [float(std[index[n]]) if n in index else 0.0 for n in _NAMES]
    inertia_c = np.asarray(inertia_matrix_from_entries(*value[4:10]), dtype=float)
    return HeldPayload(frame, value[0], spread[0], np.array(value[1:4]),
                       np.array(spread[1:4]), inertia_c)


def payload_bounds(names: Sequence[str],
                   bounds: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """The (lower, upper) bounds of the identified `payload.*` parameters among `names` (empty:
    the payload is not identified)."""
    return {name: bounds[name] for name in names if name in _NAMES}


def robot_frame(pmodel: pin.Model, pattern: str) -> str:
    """The one frame of `pmodel` whose name matches the shell pattern `pattern`.

    Raises:
      ModelError: none or several match.
    """
    found = sorted(set(fnmatch.filter([frame.name for frame in pmodel.frames], pattern)))
    if len(found) != 1:
        raise ModelError(f'the payload frame {pattern!r} matches '
                         f'{", ".join(found) if found else "no frame"} of the model; name it '
                         'with the payload_frame parameter')
    return found[0]


def frame_offset(pmodel: pin.Model, source: str, target: str) -> tuple[np.ndarray, np.ndarray]:
    """(rotation (3, 3), translation (3,) [m]) of frame `source` in frame `target`.

    Raises:
      ModelError: either frame is missing, or the two are not on the same moving body.
    """
    body_s, rotation_s, translation_s = frame_in_body(pmodel, source)
    body_t, rotation_t, translation_t = frame_in_body(pmodel, target)
    if body_s != body_t:
        raise ModelError(f'{source!r} and {target!r} are on different moving bodies: the '
                         'payload link must be rigidly attached to the payload frame')
    return rotation_t.T @ rotation_s, rotation_t.T @ (translation_s - translation_t)


def expressed_in(payload: HeldPayload, frame: str, rotation, translation) -> HeldPayload:
    """`payload` in `frame`, where its own frame sits at (rotation (3, 3), translation (3,)
    [m]); the centre of mass's standard deviations are propagated as independent."""
    rotation = np.asarray(rotation, dtype=float)
    com_std = np.sqrt((rotation ** 2) @ (payload.com_std ** 2))
    return payload._replace(frame=frame, com=rotation @ payload.com + translation,
                            com_std=com_std,
                            inertia=rotation @ payload.inertia @ rotation.T)


class SteadyMean:
    """Whether an estimate stopped moving: the means of the last `windows` windows all lie
    within one standard deviation of the latest, parameter by parameter."""

    def __init__(self, windows: int):
        if windows < 1:
            raise ValueError(f'windows must be at least 1, got {windows}')
        self.windows = windows
        self._means: list[np.ndarray] = []

    def update(self, mean, std) -> bool:
        """Add one window's (M,) mean and std; returns whether the estimate is steady."""
        mean, std = np.asarray(mean, dtype=float), np.asarray(std, dtype=float)
        self._means = [*self._means, mean][-self.windows:]
        return (len(self._means) == self.windows
                and all(np.all(np.abs(m - mean) <= std) for m in self._means))

    def reset(self) -> None:
        """Forget the windows seen (a new payload, a reset posterior)."""
        self._means = []


def on_or_outside_bounds(values: dict[str, float],
                         bounds: dict[str, tuple[float, float]]) -> list[str]:
    """One line for each of `bounds`' parameters whose value in `values` lies outside its
    (lower, upper) bounds or within `_ON_BOUND` of their width from one (a fit stopped by a
    bound, not by the data); a NaN is outside."""
    found = []
    for name, (lower, upper) in bounds.items():
        margin = _ON_BOUND * (upper - lower) if np.isfinite(upper - lower) else 0.0
        if not lower + margin < values[name] < upper - margin:
            found.append(f'{name} = {values[name]:.4g} is on or outside its bounds '
                         f'[{lower:g}, {upper:g}]')
    return found


def refusals(payload: HeldPayload, steady: bool, limits: GateLimits,
             bounds: dict[str, tuple[float, float]], previous_mass: float = 0.0,
             change: int = 0) -> list[str]:
    """Why `payload` (in the payload link's frame, as estimated) must not be handed to a
    robot, one line each; empty when it passes.

    Args:
      payload: the estimate.
      steady: whether the posterior stopped moving (`SteadyMean`).
      limits: the gate's limits.
      bounds: parameter name -> (lower, upper) of the identified `payload.*` parameters.
      previous_mass: the mass of the load the robot has now [kg].
      change: +1, the robot picked something up: the mass must exceed `previous_mass` by more
        than `CHANGE_STDS` of its standard deviations; -1, it put something down: below it by
        as much; 0: not checked.
    """
    found = []
    if not steady:
        found.append(f'not converged: the mean moved by more than one std within the last '
                     f'{limits.steady_windows} windows')
    if not payload.mass_std <= limits.max_mass_std:
        found.append(f'mass std {payload.mass_std:.3g} kg is above {limits.max_mass_std:g} kg')
    if not np.all(payload.com_std <= limits.max_com_std):
        found.append(f'centre-of-mass std {np.max(payload.com_std):.3g} m is above '
                     f'{limits.max_com_std:g} m')
    inertia_c = np.asarray(payload.inertia, dtype=float)
    if not bool(is_inertia_consistent(inertia_c)):
        found.append('the inertia about the centre of mass is not that of a real body '
                     f'(principal moments {np.round(np.linalg.eigvalsh(inertia_c), 6)} kg m^2)')
    entries = np.asarray(inertia_entries(inertia_c))
    found += on_or_outside_bounds(dict(zip(_NAMES, (payload.mass, *payload.com, *entries))),
                                  bounds)
    if change and not change * (payload.mass - previous_mass) > CHANGE_STDS * payload.mass_std:
        found.append(f'mass {payload.mass:.4g} kg is not {"above" if change > 0 else "below"} '
                     f"the current load's {previous_mass:.4g} kg by {CHANGE_STDS:g} stds "
                     f'({payload.mass_std:.2g} kg), as a load '
                     f'{"picked up" if change > 0 else "put down"} would be')
    return found
