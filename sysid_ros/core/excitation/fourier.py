"""Finite Fourier series per joint with a quintic boundary polynomial: a smooth trajectory
that starts and stops at rest.

Joint j follows (Swevers et al. 1997, "Optimal robot excitation and identification", with
the start/stop correction of Park 2006, "Fourier-based optimal excitation trajectories")

  f_j(t) = sum_l  a_jl sin(w_l t) + b_jl cos(w_l t),     w_l = 2 pi l f0,  l = 1..L
  q_j(t) = q0_j + f_j(t) - p_j(t),

where p_j is the quintic polynomial that matches f_j, its rate and its acceleration at t = 0
and t = T (the duration). Then q(0) = q(T) = q0 and qd = qdd = 0 at both ends, q is smooth
inside, and q, qd, qdd are linear in the coefficients (a, b): scaling the coefficients scales
the motion about q0.
"""

import jax.numpy as jnp
import numpy as np

# Rows: p(0), p'(0) T, p''(0) T^2, p(1), p'(1) T, p''(1) T^2 of p(s) = sum_k c_k s^k, k = 0..5,
# in the normalised time s = t / T; its inverse maps boundary values to coefficients.
_BOUNDARY = np.array([
    [1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.0, 1.0, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.0, 2.0, 0.0, 0.0, 0.0],
    [1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    [0.0, 1.0, 2.0, 3.0, 4.0, 5.0],
    [0.0, 0.0, 2.0, 6.0, 12.0, 20.0],
])
_BOUNDARY_INV = np.linalg.inv(_BOUNDARY)


def _series(coeffs, t, base_frequency):
    """f, f', f'' (T, nv) of the Fourier part: coeffs (2, nv, L) = (a, b) [rad or m]."""
    harmonics = coeffs.shape[-1]
    omega = 2.0 * jnp.pi * base_frequency * jnp.arange(1, harmonics + 1)        # (L,)
    angle = t[:, None] * omega[None]                                             # (T, L)
    sin, cos = jnp.sin(angle), jnp.cos(angle)
    a, b = coeffs[0], coeffs[1]                                                  # (nv, L)
    f = sin @ a.T + cos @ b.T
    fd = (cos * omega) @ a.T - (sin * omega) @ b.T
    fdd = -(sin * omega ** 2) @ a.T - (cos * omega ** 2) @ b.T
    return f, fd, fdd


def fourier_trajectory(coeffs, q0, t, duration, base_frequency):
    """Positions, velocities and accelerations of the start/stop-at-rest Fourier trajectory.

    Args:
      coeffs: (2, nv, L) sine and cosine amplitudes [rad or m] of harmonics 1..L.
      q0: (nv,) start and end position [rad or m].
      t: (T,) times in [0, duration] [s].
      duration: T [s] (scalar).
      base_frequency: f0, the fundamental [Hz] (scalar).

    Returns:
      q, qd, qdd: (T, nv) each [rad, rad/s, rad/s^2 or m, m/s, m/s^2]; q = q0 and qd = qdd = 0
      at t = 0 and t = duration.
    """
    f, fd, fdd = _series(coeffs, t, base_frequency)
    ends = jnp.asarray([0.0, duration])
    e, ed, edd = _series(coeffs, ends, base_frequency)                          # (2, nv)
    boundary = jnp.stack([e[0], ed[0] * duration, edd[0] * duration ** 2,
                          e[1], ed[1] * duration, edd[1] * duration ** 2])       # (6, nv)
    c = jnp.asarray(_BOUNDARY_INV) @ boundary                                    # (6, nv)
    s = t / duration
    k = jnp.arange(6.0)
    powers = s[:, None] ** k                                                     # (T, 6)
    dpowers = k * s[:, None] ** jnp.maximum(k - 1.0, 0.0)
    ddpowers = k * (k - 1.0) * s[:, None] ** jnp.maximum(k - 2.0, 0.0)
    p = powers @ c
    pd = dpowers @ c / duration
    pdd = ddpowers @ c / duration ** 2
    return q0 + f - p, fd - pd, fdd - pdd
