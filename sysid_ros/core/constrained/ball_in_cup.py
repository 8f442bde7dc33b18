"""Ball in a cup: a ball on an inextensible string hung from an arm's end effector (Lutter et
al. 2021, §3.3 and §4.1.3), and the identification of the string from motion capture.

The arm's joint motion is known (measured joint positions, velocities, accelerations); its
forward kinematics give the pose of the last arm body, and the string's anchor (the cup) is
a fixed point `anchor` (3,) in that body's frame. The ball is a point mass under gravity,
linear air drag and the closed-form string force of `constraints.string_tension_force`
(virtual work, softplus-relaxed inequality |ball - anchor| <= length):

  ball_ddot = g - drag ball_dot + f_string / m.

The ball mass cancels (f_string is proportional to m), so the identified string parameters
are `StringParams`: length, anchor translation and drag rate. The anchor's orientation (the
cup's normal) does not act on a point attachment and is not observable from ball positions.

Identification (multiple shooting): the measured ball trajectory is cut into windows; each
window starts from the measured ball position projected onto the string sphere and a
smoothed, tangent-projected velocity, is simulated with RK4 at the data rate (anchor motion
Hermite-interpolated between samples), and is compared with the measured positions.
`fit_string` minimises the squared error by Levenberg-Marquardt on the coordinates
[log length, anchor, drag] and the window starts with Jacobians by forward-mode autodiff.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.constrained import constraints
from sysid_ros.core.dynamics import kinematics
from sysid_ros.core.model import builders
from sysid_ros.core.model.types import Params, RobotModel


class StringParams(NamedTuple):
    """Parameters of the string and cup (a pytree of arrays).

    Attributes:
      length: () string length [m].
      anchor: (3,) string attachment (cup) point in the last arm body frame [m].
      drag: () linear air drag of the ball per unit mass [1/s].
    """

    length: jax.Array
    anchor: jax.Array
    drag: jax.Array


class BallInCup(NamedTuple):
    """The arm and the string model's numerical constants (close over it; not a jit argument).

    Attributes:
      model, params: the arm's kinematic tree (only its kinematics are used).
      body: index of the arm body that carries the cup (the last one).
      sharpness: [1/m] slope of the softplus switches of the string force.
      slack_tolerance: [m] the string acts fully from length - slack_tolerance on.
      frequency: [rad/s] Baumgarte frequency that holds |ball - anchor| at length.
    """

    model: RobotModel
    params: Params
    body: int
    sharpness: float = 2000.0
    slack_tolerance: float = 2.5e-3
    frequency: float = 20.0


class BallData(NamedTuple):
    """Synchronised arm joint data and ball motion capture at a fixed rate.

    Attributes:
      q, qd, qdd: (T, na) arm joint positions [rad], velocities [rad/s], accelerations
        [rad/s^2].
      ball: (T, 3) measured ball positions [m] (world).
    """

    q: jax.Array
    qd: jax.Array
    qdd: jax.Array
    ball: jax.Array


def ceiling_arm(lengths=(0.35, 0.3, 0.1), masses=(2.0, 1.5, 0.5), dtype=jnp.float64):
    """A 3-joint arm hanging from the ceiling (`builders.chain`) with axes z, y, x.

    The base joint yaws the arm, the next two tilt the last body about two axes, so the cup
    anchor moves in all three directions and the last body takes varied orientations.
    """
    model, params = builders.chain(3, lengths, masses, dtype=dtype)
    axes = ((0.0, 0.0, 1.0), (0.0, 1.0, 0.0), (1.0, 0.0, 0.0))
    return BallInCup(dataclasses.replace(model, name='ceiling_arm', axis=axes), params, 2)


def anchor_motion(cup: BallInCup, anchor, q, qd, qdd):
    """World position, velocity and acceleration of the anchor, (3, 3) rows [p; v; a].

    The velocity and acceleration are the exact first and second time derivatives along
    (qd, qdd) (`constraints.along_path`).

    Args:
      cup: the arm and the string model's constants.
      anchor: (3,) anchor in the frame of body `cup.body` [m].
      q: (na,) joint positions [rad].
      qd: (na,) joint velocities [rad/s].
      qdd: (na,) joint accelerations [rad/s^2].
    """
    def position(q):
        R, p = kinematics.forward_kinematics(cup.model, cup.params, q)
        return p[cup.body] + R[cup.body] @ anchor

    return jnp.stack(constraints.along_path(position, q, qd, qdd))


def anchor_motions(cup: BallInCup, anchor, joints):
    """`anchor_motion` over samples: joints (..., 3 na) rows [q, qd, qdd] -> (..., 3, 3)."""
    na = cup.model.nv
    flat = joints.reshape(-1, 3 * na)
    motion = jax.vmap(lambda j: anchor_motion(cup, anchor, j[:na], j[na:2 * na], j[2 * na:]))
    return motion(flat).reshape(joints.shape[:-1] + (3, 3))


def ball_acceleration(cup: BallInCup, string: StringParams, ball, ball_velocity, anchor):
    """Ball acceleration (3,) [m/s^2]: gravity, drag and the string force per unit mass.

    Args:
      cup: the arm and the string model's constants.
      string: the string parameters.
      ball: (3,) world position [m].
      ball_velocity: (3,) world velocity [m/s].
      anchor: (3, 3) rows [p; v; a] of the anchor (`anchor_motion`).
    """
    f = constraints.string_tension_force(
        ball, ball_velocity, anchor[0], anchor[1], anchor[2], string.length, 1.0,
        cup.model.gravity, cup.sharpness, cup.frequency, cup.slack_tolerance)
    return jnp.asarray(cup.model.gravity, ball.dtype) - string.drag * ball_velocity + f


def _hermite_midpoint(a0, a1, dt):
    """Anchor [p; v; a] at the middle of a step from its values at both ends (cubic Hermite
    for p and v, linear for a)."""
    p = 0.5 * (a0[0] + a1[0]) + dt / 8.0 * (a0[1] - a1[1])
    v = 0.5 * (a0[1] + a1[1]) + dt / 8.0 * (a0[2] - a1[2])
    return jnp.stack([p, v, 0.5 * (a0[2] + a1[2])])


def simulate(cup: BallInCup, string: StringParams, ball0, anchors, dt):
    """RK4 rollout of the ball, (T + 1, 6) states [p; v] with ball0 (6,) first.

    Args:
      cup: the arm and the string model's constants.
      string: the string parameters.
      ball0: (6,) initial ball state [p; v] [m, m/s].
      anchors: (T + 1, 3, 3) anchor motion at the sample times (`anchor_motion`).
      dt: sample period [s].
    """
    def derivative(x, anchor):
        return jnp.concatenate([x[3:], ball_acceleration(cup, string, x[:3], x[3:], anchor)])

    def step(x, ends):
        a0, a1 = ends
        mid = _hermite_midpoint(a0, a1, dt)
        k1 = derivative(x, a0)
        k2 = derivative(x + 0.5 * dt * k1, mid)
        k3 = derivative(x + 0.5 * dt * k2, mid)
        k4 = derivative(x + dt * k3, a1)
        x = x + dt / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
        return x, x

    _, states = jax.lax.scan(step, ball0, (anchors[:-1], anchors[1:]))
    return jnp.concatenate([ball0[None], states])


def smoothed_velocity(positions, dt, half_width: int):
    """Velocity (T - 2 w, 3) [m/s] of samples w .. T-w-1 by a local least-squares line over
    2 w + 1 samples (Savitzky-Golay first derivative: sum_k k x_{i+k} / (dt sum_k k^2)).

    Args:
      positions: (T, 3) [m].
      dt: sample period [s].
      half_width: w >= 1 (static).
    """
    k = jnp.arange(-half_width, half_width + 1, dtype=positions.dtype)
    count = positions.shape[0] - 2 * half_width
    shifted = jnp.stack([positions[half_width + j:half_width + j + count]
                         for j in range(-half_width, half_width + 1)])
    return jnp.einsum('k,kti->ti', k, shifted) / (dt * jnp.sum(k**2))


def taut_start(string: StringParams, ball, ball_velocity, anchor):
    """A ball state (6,) on the taut string: the position projected radially onto the sphere
    |ball - anchor| = length, the relative velocity stripped of its radial part."""
    r = ball - anchor[0]
    direction = r / jnp.linalg.norm(r)
    relative = ball_velocity - anchor[1]
    relative = relative - (relative @ direction) * direction
    return jnp.concatenate([anchor[0] + string.length * direction, anchor[1] + relative])


class Windows(NamedTuple):
    """Multiple-shooting windows cut from `BallData` (see `make_windows`).

    Attributes:
      joints: (W, H + 1, 3 na) arm joint data [q, qd, qdd] of each window.
      ball: (W, H + 1, 3) measured ball positions [m]; velocity: (W, 3) smoothed ball
        velocity at each window's start [m/s].
    """

    joints: jax.Array
    ball: jax.Array
    velocity: jax.Array


def make_windows(data: BallData, dt, horizon: int, half_width: int = 4) -> Windows:
    """Cut the data into consecutive windows of `horizon` steps (host-side, static shapes).

    Windows start at samples half_width, half_width + horizon, ... so that each start has a
    smoothed velocity; the last partial window is dropped.

    Raises:
      ValueError: when the joint and ball data have different lengths or widths, or are too
        short for one window (names the sizes).
    """
    T = data.ball.shape[0]
    lengths = {name: np.shape(getattr(data, name)) for name in BallData._fields}
    if (len({shape[0] for shape in lengths.values()}) != 1 or lengths['ball'][1:] != (3,)
            or len({lengths[name] for name in ('q', 'qd', 'qdd')}) != 1):
        raise ValueError(f'ball_in_cup: BallData shapes {lengths}: expected q, qd, qdd '
                         f'(T, na) and ball (T, 3) with the same T')
    if T < horizon + 2 * half_width + 1:
        raise ValueError(f'ball_in_cup: {T} samples are too few for one window of {horizon} '
                         f'steps (expected >= {horizon + 2 * half_width + 1})')
    velocity = smoothed_velocity(jnp.asarray(data.ball), dt, half_width)
    starts = np.arange(half_width, T - half_width - horizon, horizon)
    index = starts[:, None] + np.arange(horizon + 1)[None]
    joints = jnp.concatenate([data.q, data.qd, data.qdd], axis=1)
    return Windows(joints[index], jnp.asarray(data.ball)[index],
                   velocity[starts - half_width])


def initial_starts(cup: BallInCup, string: StringParams, windows: Windows):
    """(W, 6) window start states from the data: measured position and smoothed velocity made
    consistent with a taut string of `string` (`taut_start`)."""
    anchors = anchor_motions(cup, string.anchor, windows.joints[:, 0])
    return jax.vmap(taut_start, in_axes=(None, 0, 0, 0))(string, windows.ball[:, 0],
                                                         windows.velocity, anchors)


def window_residual(cup: BallInCup, string: StringParams, start, joints, ball, dt):
    """Simulated minus measured ball positions (H, 3) [m] of one window.

    Args:
      cup: the arm and the string model's constants.
      string: the string parameters.
      start: (6,) ball state [p; v] at the window's first sample.
      joints: (H + 1, 3 na) arm joint data [q, qd, qdd].
      ball: (H + 1, 3) measured positions (the first one is not compared).
      dt: sample period [s].
    """
    anchors = anchor_motions(cup, string.anchor, joints)
    return simulate(cup, string, start, anchors, dt)[1:, :3] - ball[1:]


def to_unconstrained(string: StringParams):
    """(5,) z = [log length, anchor, drag] (host or traced).

    The drag stays linear: it is barely observable on short data, and a logarithm would let
    it run to zero (a singular Jacobian column) instead of ending near zero with its error.
    """
    return jnp.concatenate([jnp.log(string.length)[None], string.anchor, string.drag[None]])


def from_unconstrained(z) -> StringParams:
    """StringParams from z = [log length, anchor (3,), drag] (5,)."""
    return StringParams(jnp.exp(z[0]), z[1:4], z[4])


class StringFit(NamedTuple):
    """Outcome of `fit_string`.

    Attributes:
      string: identified StringParams; std: StringParams of Gauss-Newton standard deviations
        (residual variance times the inverse reduced normal matrix, delta method for the
        length's logarithm); starts: (W, 6) identified window start states;
      rms: () root mean square position error [m]; rms0: () the same at the start;
      iterations: () Levenberg-Marquardt iterations run.
    """

    string: StringParams
    std: StringParams
    starts: jax.Array
    rms: jax.Array
    rms0: jax.Array
    iterations: jax.Array


def fit_string(cup: BallInCup, windows: Windows, string0: StringParams, dt,
               iterations: int = 20) -> StringFit:
    """Identify StringParams and the window start states by Levenberg-Marquardt.

    Multiple shooting with free start states (6 per window) avoids the bias that noisy
    measured starts would put into the string parameters. The normal equations have an
    arrow structure (5 shared columns, a 6-column block per window) and are solved through
    the Schur complement on the shared block: each iteration costs 11 forward-mode tangents
    per window. Steps that lower |r|^2 are kept (mu / 3), others raise the damping mu (x 4)
    of mu diag(J^T J). jit-compatible; `iterations` is static.
    """
    def residual(z, start, joints, ball):
        return window_residual(cup, from_unconstrained(z), start, joints, ball, dt).ravel()

    def cost(z, starts):
        r = jax.vmap(residual, in_axes=(None, 0, 0, 0))(z, starts, windows.joints, windows.ball)
        return jnp.sum(r**2)

    def blocks(z, starts):
        """Per window: J_z (n, 5), J_s (n, 6), r (n,)."""
        def one(start, joints, ball):
            J_z, J_s = jax.jacfwd(residual, argnums=(0, 1))(z, start, joints, ball)
            return J_z, J_s, residual(z, start, joints, ball)
        return jax.vmap(one)(starts, windows.joints, windows.ball)

    def reduced_system(J_z, J_s, r, mu):
        """Schur complement (5, 5), right-hand side (5,) and per-window pieces."""
        H_zz = jnp.einsum('wni,wnj->ij', J_z, J_z)
        H_zs = jnp.einsum('wni,wnj->wij', J_z, J_s)
        H_ss = jnp.einsum('wni,wnj->wij', J_s, J_s)
        g_z, g_s = jnp.einsum('wni,wn->i', J_z, r), jnp.einsum('wni,wn->wi', J_s, r)
        damp = lambda H: H + mu * jnp.diag(jnp.diag(H))  # noqa: E731
        H_ss = jax.vmap(damp)(H_ss)
        solve_ss = jnp.linalg.solve(H_ss, jnp.concatenate([jnp.swapaxes(H_zs, 1, 2),
                                                          g_s[..., None]], axis=2))
        schur = damp(H_zz) - jnp.einsum('wij,wjk->ik', H_zs, solve_ss[..., :-1])
        rhs = g_z - jnp.einsum('wij,wj->i', H_zs, solve_ss[..., -1])
        return schur, rhs, H_zs, H_ss, g_s

    def iterate(_, carry):
        z, starts, mu, value = carry
        schur, rhs, H_zs, H_ss, g_s = reduced_system(*blocks(z, starts), mu)
        dz = -jnp.linalg.solve(schur, rhs)
        ds = -jnp.linalg.solve(H_ss, (g_s + jnp.einsum('wij,i->wj', H_zs, dz))[..., None])
        new_z, new_starts = z + dz, starts + ds[..., 0]
        new_value = cost(new_z, new_starts)
        better = new_value < value
        return (jnp.where(better, new_z, z), jnp.where(better, new_starts, starts),
                jnp.where(better, mu / 3.0, mu * 4.0), jnp.where(better, new_value, value))

    z0 = to_unconstrained(string0)
    starts0 = initial_starts(cup, string0, windows)
    value0 = cost(z0, starts0)
    z, starts, _, value = jax.lax.fori_loop(
        0, iterations, iterate, (z0, starts0, jnp.asarray(1e-3, z0.dtype), value0))
    J_z, J_s, r = blocks(z, starts)
    n = r.size
    dof = n - z.shape[0] - starts.size
    schur = reduced_system(J_z, J_s, r, 0.0)[0]
    std_z = jnp.sqrt(jnp.diag(value / dof * jnp.linalg.inv(schur)))
    string = from_unconstrained(z)
    std = StringParams(string.length * std_z[0], std_z[1:4], std_z[4])
    return StringFit(string, std, starts, jnp.sqrt(value / n), jnp.sqrt(value0 / n),
                     jnp.asarray(iterations))


def cosine_excitation(t, amplitude, frequency):
    """Slow cosine joint motion q = A (1 - cos(2 pi f t)) starting at rest (Lutter et al.
    2021, §4.1.3).

    Args:
      t: (T,) [s]; amplitude: (na,) [rad]; frequency: (na,) [Hz].

    Returns:
      q, qd, qdd: (T, na) each.
    """
    w = 2.0 * jnp.pi * jnp.asarray(frequency)
    phase = w * jnp.asarray(t)[:, None]
    amplitude = jnp.asarray(amplitude)
    return (amplitude * (1.0 - jnp.cos(phase)), amplitude * w * jnp.sin(phase),
            amplitude * w**2 * jnp.cos(phase))


def synthetic_data(cup: BallInCup, string: StringParams, samples: int, dt: float,
                   amplitude, frequency, noise_std: float, key,
                   substeps: int = 10) -> BallData:
    """Simulated measurements with known truth: the arm follows `cosine_excitation`, the ball
    starts hanging at rest under the anchor and is simulated with RK4 at dt / substeps (exact
    anchor motion); positions are sampled every dt and get Gaussian noise [m].
    """
    fine_t = jnp.arange((samples - 1) * substeps + 1) * (dt / substeps)
    q, qd, qdd = cosine_excitation(fine_t, amplitude, frequency)
    anchor0 = anchor_motion(cup, string.anchor, q[0], qd[0], qdd[0])
    hanging = anchor0[0] + string.length * jnp.array([0.0, 0.0, -1.0])
    ball0 = jnp.concatenate([hanging, jnp.zeros(3)])

    @jax.jit
    def fine_rollout(joints, ball0):
        anchors = anchor_motions(cup, string.anchor, joints)
        return simulate(cup, string, ball0, anchors, dt / substeps)[::substeps, :3]

    ball = fine_rollout(jnp.concatenate([q, qd, qdd], axis=1), ball0)
    noise = noise_std * jax.random.normal(key, ball.shape, ball.dtype)
    return BallData(q[::substeps], qd[::substeps], qdd[::substeps], ball + noise)
