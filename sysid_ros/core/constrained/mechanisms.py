"""Planar multibody mechanisms in dependent natural coordinates (Blanco-Claraco et al. 2021).

A mechanism is a set of points (fixed or free) joined by rigid uniform bars; a point shared by two
bars is a revolute joint. The dependent coordinates `q` are the x, y of the free points, in point
order. Selected bars may carry an *independent coordinate* `z` (their absolute angle from the
world x axis), which is where an actuator torque and viscous joint friction act (the bar's pivot
on the ground, or its relative rotation when both ends move).

Frames and units: world plane x right, y up [m]; angles counter-clockwise [rad]; masses [kg].

Constraints:
  * bar k between points i, j:  Phi_k(q) = |r_j - r_i|^2 - L_k^2            [m^2]   (eq 43)
  * angle coordinate of bar k:  H_k(q, z) = d_x sin z - d_y cos z,  d = r_j - r_i   [m]

`H` is the cross product of the bar direction with (cos z, sin z): it vanishes when the bar
points along z and has dH/dz = |d| != 0 there, so, unlike the two-branch form of eqs 46-47, it
needs no switch between equations.

Equations of motion: dependent coordinates by the block inverse of the augmented system (eq 6),
independent coordinates by projection with R = dq'/dz' (eq 15).
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
import functools

import jax
import jax.numpy as jnp
import numpy as np

GRAVITY = (0.0, -9.81)


class MechanismError(ValueError):
    """A mechanism description or state that cannot be simulated; the message names the part."""


def _static(**kwargs):
    return field(metadata={'static': True}, **kwargs)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Mechanism:
    """Static description of a planar mechanism (hashable; build it with `make_mechanism`).

    Attributes:
      point_names: (np,) names of all points.
      fixed_xy: (np,) world position (x, y) [m] of each fixed point, None for a free point.
      bar_names: (nb,) bar names.
      bar_points: (nb,) point indices (i, j) joined by each bar.
      bar_lengths: (nb,) bar lengths [m].
      angle_bars: (nz,) bars whose absolute angle is an independent coordinate.
      gravity: (2,) gravity vector [m/s^2].
    """

    point_names: tuple[str, ...] = _static()
    fixed_xy: tuple = _static()
    bar_names: tuple[str, ...] = _static()
    bar_points: tuple[tuple[int, int], ...] = _static()
    bar_lengths: tuple[float, ...] = _static()
    angle_bars: tuple[int, ...] = _static(default=())
    gravity: tuple[float, float] = _static(default=GRAVITY)

    @property
    def free_points(self) -> tuple[int, ...]:
        """Indices of the free points, in the order of `q`."""
        return tuple(i for i, xy in enumerate(self.fixed_xy) if xy is None)

    @property
    def num_coords(self) -> int:
        """n: number of dependent coordinates."""
        return 2 * len(self.free_points)

    @property
    def num_constraints(self) -> int:
        """m: number of bar constraints."""
        return len(self.bar_points)

    @property
    def num_independent(self) -> int:
        """nz: number of independent (angle) coordinates."""
        return len(self.angle_bars)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class MechanismParams:
    """Differentiable parameters of a mechanism.

    Attributes:
      bar_masses: (nb,) mass of each uniform bar [kg].
      damping: (nz,) viscous friction on each angle coordinate's joint [N m s/rad].
    """

    bar_masses: jax.Array
    damping: jax.Array


def make_mechanism(points, bars, angle_bars=(), gravity=GRAVITY) -> Mechanism:
    """Builds and checks a mechanism description.

    Args:
      points: sequence of (name, x, y, fixed) [m]; the (x, y) of free points are not stored.
      bars: sequence of (name, point_i, point_j, length) with point names; length [m].
      angle_bars: names of bars whose absolute angle is an independent coordinate.
      gravity: (2,) [m/s^2].

    Raises:
      MechanismError: duplicate names, unknown points, non-positive lengths, a bar between two
        fixed points, or a dangling free point (on no bar).
    """
    names = [p[0] for p in points]
    _check_unique('point', names)
    _check_unique('bar', [b[0] for b in bars])
    index = {name: i for i, name in enumerate(names)}
    fixed_xy = tuple((float(x), float(y)) if fixed else None for _, x, y, fixed in points)
    bar_points, lengths = [], []
    for name, pi, pj, length in bars:
        for p in (pi, pj):
            if p not in index:
                raise MechanismError(f"bar '{name}': unknown point '{p}'; points are {names}")
        if pi == pj:
            raise MechanismError(f"bar '{name}': joins point '{pi}' to itself")
        if not float(length) > 0.0:
            raise MechanismError(f"bar '{name}': length must be > 0 m, got {length}")
        i, j = index[pi], index[pj]
        if fixed_xy[i] is not None and fixed_xy[j] is not None:
            raise MechanismError(f"bar '{name}': both points '{pi}' and '{pj}' are fixed; "
                                 'a bar needs at least one free point')
        bar_points.append((i, j))
        lengths.append(float(length))
    on_bar = {k for ij in bar_points for k in ij}
    for i, name in enumerate(names):
        if fixed_xy[i] is None and i not in on_bar:
            raise MechanismError(f"point '{name}' is dangling: it is free but on no bar")
    bar_index = {b[0]: k for k, b in enumerate(bars)}
    for name in angle_bars:
        if name not in bar_index:
            raise MechanismError(f"angle coordinate: unknown bar '{name}'")
    return Mechanism(
        point_names=tuple(names), fixed_xy=fixed_xy, bar_names=tuple(b[0] for b in bars),
        bar_points=tuple(bar_points), bar_lengths=tuple(lengths),
        angle_bars=tuple(bar_index[name] for name in angle_bars),
        gravity=(float(gravity[0]), float(gravity[1])))


def _check_unique(kind, names):
    seen = set()
    for name in names:
        if name in seen:
            raise MechanismError(f"{kind} name '{name}' is used twice")
        seen.add(name)


def four_bar(crank_angle=0.0, masses=(1.0, 2.0, 4.0), damping=0.0, gravity=GRAVITY):
    """The four-bar linkage of Blanco-Claraco et al. 2021 (section 7, Fig. 6).

    Ground pivots A = (0, 0) and B = (4, 0); crank A-1 (1 m, 1 kg), coupler 1-2 (2 m, 2 kg),
    rocker 2-B (sqrt(13) m, 4 kg); at crank angle 0, 1 = (1, 0) and 2 = (1, 2). The crank angle
    is the independent coordinate, with viscous friction `damping` [N m s/rad] at pivot A.

    Returns:
      (mechanism, params, q0): q0 (4,) = [x1, y1, x2, y2] [m] assembled at `crank_angle` [rad]
      on the branch of the drawing (point 2 above the ground line).
    """
    mech = make_mechanism(
        points=[('A', 0.0, 0.0, True), ('1', 0, 0, False), ('2', 0, 0, False),
                ('B', 4.0, 0.0, True)],
        bars=[('crank', 'A', '1', 1.0), ('coupler', '1', '2', 2.0),
              ('rocker', '2', 'B', float(np.sqrt(13.0)))],
        angle_bars=('crank',), gravity=gravity)
    params = MechanismParams(bar_masses=jnp.asarray(masses, dtype=float),
                             damping=jnp.asarray([damping], dtype=float))
    q_guess = jnp.array([1.0, 0.0, 1.0, 2.0])
    q0 = solve_position(mech, jnp.array([crank_angle]), q_guess)
    return mech, params, q0


# Mechanism builders by name (`model.mechanism` of a configuration): each returns
# (mechanism, params, q0) with q0 (n,) an assembled configuration that picks the branch.
MECHANISMS = {'four_bar': four_bar}


# ----------------------------------------------------------------------------- kinematics
# Every bar vector is affine in q: d_k = D_k q + d0_k. The constant maps make Phi, its
# Jacobian and its time derivatives closed-form (eq 43) and keep the compiled programs small.


@functools.lru_cache(maxsize=None)
def bar_maps(mech: Mechanism):
    """Constant maps of the bar vectors d = r_j - r_i (NumPy, built once per mechanism).

    Returns:
      (bar_q (nb, 2, n), bar_offset (nb, 2) [m], mass_basis (nb, n, n), gravity_basis (n, nb)):
      d_k = bar_q[k] @ q + bar_offset[k]; M = sum_k m_k mass_basis[k]; Q_gravity = G @ masses.
    """
    n = mech.num_coords
    free = {p: k for k, p in enumerate(mech.free_points)}
    select = np.zeros((len(mech.fixed_xy), 2, n))
    offset = np.zeros((len(mech.fixed_xy), 2))
    for i, xy in enumerate(mech.fixed_xy):
        if xy is None:
            select[i, :, 2 * free[i]:2 * free[i] + 2] = np.eye(2)
        else:
            offset[i] = xy
    i, j = (np.array(ix) for ix in zip(*mech.bar_points))
    bar_q, bar_offset = select[j] - select[i], offset[j] - offset[i]
    ends = select[i], select[j]
    weights = np.array([[1.0 / 3.0, 1.0 / 6.0], [1.0 / 6.0, 1.0 / 3.0]])
    mass_basis = sum(weights[a, b] * np.einsum('kcn,kcm->knm', ends[a], ends[b])
                     for a in range(2) for b in range(2))
    gravity_basis = 0.5 * np.einsum('kcn,c->nk', ends[0] + ends[1], np.asarray(mech.gravity))
    return bar_q, bar_offset, mass_basis, gravity_basis


def point_positions(mech: Mechanism, q: jax.Array) -> jax.Array:
    """(np, 2) world positions [m] of all points for dependent coordinates q (n,)."""
    free = {p: k for k, p in enumerate(mech.free_points)}
    rows = [jnp.asarray(xy, dtype=q.dtype) if xy is not None else q[2 * free[i]:2 * free[i] + 2]
            for i, xy in enumerate(mech.fixed_xy)]
    return jnp.stack(rows)


def bar_vectors(mech: Mechanism, q: jax.Array) -> jax.Array:
    """(nb, 2) bar vectors d = r_j - r_i [m]."""
    bar_q, bar_offset, _, _ = bar_maps(mech)
    return jnp.einsum('kcn,n->kc', bar_q, q) + bar_offset


def constraints(mech: Mechanism, q: jax.Array) -> jax.Array:
    """Phi(q) (m,) [m^2]: squared bar lengths minus their nominal values (eq 43)."""
    d = bar_vectors(mech, q)
    return jnp.sum(d * d, axis=1) - jnp.asarray(mech.bar_lengths) ** 2


def constraint_jacobian(mech: Mechanism, q: jax.Array) -> jax.Array:
    """Phi_q (m, n) = 2 d_k^T D_k."""
    return 2.0 * jnp.einsum('kc,kcn->kn', bar_vectors(mech, q), bar_maps(mech)[0])


def constraint_bias(mech: Mechanism, q: jax.Array, qd: jax.Array) -> jax.Array:
    """(Phi_q q')_q q' (m,) = 2 |d'_k|^2: the velocity-product term of Phi'' (eq 3)."""
    dd = jnp.einsum('kcn,n->kc', bar_maps(mech)[0], qd)
    return 2.0 * jnp.sum(dd * dd, axis=1)


def bar_angles(mech: Mechanism, q: jax.Array) -> jax.Array:
    """(nz,) absolute angle [rad] of each angle bar, in (-pi, pi]."""
    d = bar_vectors(mech, q)[np.array(mech.angle_bars, dtype=int)]
    return jnp.arctan2(d[:, 1], d[:, 0])


def bar_angular_velocities(mech: Mechanism, q: jax.Array, qd: jax.Array) -> jax.Array:
    """(nb,) angular velocity [rad/s] of every bar, (d x d') / |d|^2 (what a gyroscope reads)."""
    d = bar_vectors(mech, q)
    dd = jnp.einsum('kcn,n->kc', bar_maps(mech)[0], qd)
    return (d[:, 0] * dd[:, 1] - d[:, 1] * dd[:, 0]) / jnp.sum(d * d, axis=1)


def _angle_terms(mech, q, z):
    angle = np.array(mech.angle_bars, dtype=int)
    d = bar_vectors(mech, q)[angle]
    return d, bar_maps(mech)[0][angle], jnp.sin(z), jnp.cos(z)


def angle_constraints(mech: Mechanism, q: jax.Array, z: jax.Array) -> jax.Array:
    """H(q, z) (nz,) [m]: links each angle bar's direction to its independent coordinate z."""
    d, _, s, c = _angle_terms(mech, q, z)
    return d[:, 0] * s - d[:, 1] * c


def link_constraints(mech: Mechanism, q: jax.Array, z: jax.Array) -> jax.Array:
    """G(q, z) = [Phi(q); H(q, z)] (m + nz,): the position problem of eq 30."""
    return jnp.concatenate([constraints(mech, q), angle_constraints(mech, q, z)])


def link_jacobians(mech: Mechanism, q: jax.Array, z: jax.Array):
    """(G_q (m + nz, n), G_z (m + nz, nz)) of `link_constraints`."""
    d, dq, s, c = _angle_terms(mech, q, z)
    h_q = jnp.einsum('kc,kcn->kn', jnp.stack([s, -c], axis=1), dq)
    h_z = d[:, 0] * c + d[:, 1] * s
    g_z = jnp.concatenate([jnp.zeros((mech.num_constraints, len(h_z)), dtype=q.dtype),
                           jnp.diag(h_z)])
    return jnp.concatenate([constraint_jacobian(mech, q), h_q]), g_z


def link_bias(mech: Mechanism, q, qd, z, zd) -> jax.Array:
    """(m + nz,) velocity-product term of G'': [2 |d'|^2; 2 z' d'.(c, s) - z'^2 H]."""
    d, dq, s, c = _angle_terms(mech, q, z)
    dd = jnp.einsum('kcn,n->kc', dq, qd)
    h_bias = 2.0 * zd * (dd[:, 0] * c + dd[:, 1] * s) - zd**2 * (d[:, 0] * s - d[:, 1] * c)
    return jnp.concatenate([constraint_bias(mech, q, qd), h_bias])


def spd_solve(a: jax.Array, b: jax.Array) -> jax.Array:
    """Solves a x = b for a small symmetric positive definite a (k, k), b (k,) or (k, r).

    Cholesky unrolled over the static size k: a few fused elementwise XLA operations instead
    of LAPACK calls, which dominate the run time of these tiny systems under `jacfwd`.
    """
    k = a.shape[0]
    chol = [[None] * k for _ in range(k)]
    for j in range(k):
        chol[j][j] = jnp.sqrt(a[j, j] - sum(chol[j][i] ** 2 for i in range(j)))
        for r in range(j + 1, k):
            chol[r][j] = (a[r, j] - sum(chol[r][i] * chol[j][i] for i in range(j))) / chol[j][j]
    y = []
    for r in range(k):
        y.append((b[r] - sum(chol[r][i] * y[i] for i in range(r))) / chol[r][r])
    x = [None] * k
    for r in reversed(range(k)):
        x[r] = (y[r] - sum(chol[i][r] * x[i] for i in range(r + 1, k))) / chol[r][r]
    return jnp.stack(x)


def _square_solve(a, b):
    """a^-1 b for a small square nonsingular a, by the normal equations (a^T a is SPD)."""
    return spd_solve(a.T @ a, a.T @ b)


def velocity_transform(mech: Mechanism, q: jax.Array, z: jax.Array) -> jax.Array:
    """R (n, nz) = dq'/dz' (eq 11): columns span the null space of Phi_q."""
    g_q, g_z = link_jacobians(mech, q, z)
    return -_square_solve(g_q, g_z)


def acceleration_bias(mech, q, qd, z, zd) -> jax.Array:
    """S (n,): q'' = R z'' + S, from G'' = 0 (eq 12)."""
    g_q, _ = link_jacobians(mech, q, z)
    return -_square_solve(g_q, link_bias(mech, q, qd, z, zd))


def solve_position(mech: Mechanism, z: jax.Array, q_guess: jax.Array, iterations=12):
    """Position problem: q (n,) with G(q, z) = 0 by Newton's method from q_guess (square G)."""
    def newton(_, q):
        return q - _square_solve(link_jacobians(mech, q, z)[0], link_constraints(mech, q, z))
    return jax.lax.fori_loop(0, iterations, newton, q_guess)


# ----------------------------------------------------------------------------- dynamics


def mass_matrix(mech: Mechanism, params: MechanismParams) -> jax.Array:
    """M (n, n) [kg]: uniform bars in natural coordinates, m [[1/3, 1/6], [1/6, 1/3]] (x) I2."""
    return jnp.einsum('k,knm->nm', params.bar_masses, bar_maps(mech)[2])


def actuation_matrix(mech: Mechanism, q: jax.Array) -> jax.Array:
    """B (n, nz): generalized force of unit torques on the angle bars; a torque tau on bar
    d = r_j - r_i does virtual work tau (d x dd) / |d|^2."""
    d, dq, _, _ = _angle_terms(mech, q, jnp.zeros(mech.num_independent, dtype=q.dtype))
    perp = jnp.stack([-d[:, 1], d[:, 0]], axis=1) / jnp.sum(d * d, axis=1, keepdims=True)
    return jnp.einsum('kc,kcn->nk', perp, dq)


def generalized_forces(mech, params, q, qd, u) -> jax.Array:
    """Q (n,) [N]: gravity on the bars plus, on each angle bar, torque u (nz,) [N m] minus
    viscous friction damping (nz,) times the bar's angular velocity."""
    omega = bar_angular_velocities(mech, q, qd)[np.array(mech.angle_bars, dtype=int)]
    torque = u - params.damping * omega
    return bar_maps(mech)[3] @ params.bar_masses + actuation_matrix(mech, q) @ torque


def forward_dynamics_dependent(mech, params, q, qd, u) -> jax.Array:
    """q'' (n,) from eq 6: the first block row of the inverse of [[M, Phi_q^T], [Phi_q, 0]].

    With A = Phi_q, c = -(Phi_q q')' q' and S = A M^-1 A^T:
      q'' = Theta Q + M^-1 A^T S^-1 c,  Theta = M^-1 - M^-1 A^T S^-1 A M^-1  (eq 7, symmetric),
    evaluated as q'' = M^-1 Q - M^-1 A^T S^-1 (A M^-1 Q - c) with SPD solves only.
    """
    m = mass_matrix(mech, params)
    a = constraint_jacobian(mech, q)
    c = -constraint_bias(mech, q, qd)
    q_force = generalized_forces(mech, params, q, qd, u)
    m_inv_at = spd_solve(m, a.T)
    m_inv_q = spd_solve(m, q_force)
    return m_inv_q - m_inv_at @ spd_solve(a @ m_inv_at, a @ m_inv_q - c)


def forward_dynamics_independent(mech, params, q, qd, z, zd, u) -> jax.Array:
    """z'' (nz,) from eq 15: (R^T M R) z'' = R^T (Q - M S)."""
    r = velocity_transform(mech, q, z)
    s = acceleration_bias(mech, q, qd, z, zd)
    m = mass_matrix(mech, params)
    q_force = generalized_forces(mech, params, q, qd, u)
    return spd_solve(r.T @ m @ r, r.T @ (q_force - m @ s))


def inverse_dynamics_independent(mech, params, q, qd, z, zd, zdd) -> jax.Array:
    """u (nz,) [N m]: the angle-bar torques that produce z'' (eq 15 solved for u)."""
    r = velocity_transform(mech, q, z)
    s = acceleration_bias(mech, q, qd, z, zd)
    m = mass_matrix(mech, params)
    q_passive = generalized_forces(mech, params, q, qd, jnp.zeros_like(zdd))
    return jnp.linalg.solve(r.T @ actuation_matrix(mech, q),
                            r.T @ (m @ (r @ zdd + s) - q_passive))


def typical_torque(mech: Mechanism, params: MechanismParams, q: jax.Array) -> jax.Array:
    """(nz,) typical angle-bar torque [N m] at the assembled configuration q (n,): the torque
    that holds it against gravity plus the reduced inertia (R^T M R) times 1 rad/s^2."""
    z = bar_angles(mech, q)
    zero = jnp.zeros_like(z)
    r = velocity_transform(mech, q, z)
    gravity = inverse_dynamics_independent(mech, params, q, jnp.zeros_like(q), z, zero, zero)
    return jnp.abs(gravity) + jnp.diag(r.T @ mass_matrix(mech, params) @ r)


def simulate_independent_rk4(mech, params, q0, z0, zd0, u, dt, substeps=1):
    """Reference simulation: RK4 on (z, z') with the position problem solved at every stage.

    Args:
      q0: (n,) assembled initial dependent coordinates (branch choice and Newton start).
      z0, zd0: (nz,) initial independent position [rad] and velocity [rad/s].
      u: (T, nz) torques [N m], held over each output step.
      dt: output step [s]; each is integrated with `substeps` RK4 steps.

    Returns:
      (q, qd, z, zd): (T + 1, ...) trajectories at the output steps.
    """
    h = dt / substeps

    def deriv(state, q_guess, uk):
        z, zd = state
        q = solve_position(mech, z, q_guess, iterations=4)
        qd = velocity_transform(mech, q, z) @ zd
        return (zd, forward_dynamics_independent(mech, params, q, qd, z, zd, uk)), q

    def rk4(carry, uk):
        state, q = carry
        k1, q = deriv(state, q, uk)
        k2, _ = deriv(jax.tree.map(lambda x, k: x + 0.5 * h * k, state, k1), q, uk)
        k3, _ = deriv(jax.tree.map(lambda x, k: x + 0.5 * h * k, state, k2), q, uk)
        k4, _ = deriv(jax.tree.map(lambda x, k: x + h * k, state, k3), q, uk)
        state = jax.tree.map(lambda x, a, b, c, d: x + h / 6 * (a + 2 * b + 2 * c + d),
                             state, k1, k2, k3, k4)
        return (state, q), None

    def step(carry, uk):
        carry, _ = jax.lax.scan(rk4, carry, jnp.broadcast_to(uk, (substeps,) + uk.shape))
        (z, zd), q = carry
        q = solve_position(mech, z, q, iterations=4)
        qd = velocity_transform(mech, q, z) @ zd
        return ((z, zd), q), (q, qd, z, zd)

    q0 = solve_position(mech, z0, q0)
    qd0 = velocity_transform(mech, q0, z0) @ zd0
    _, traj = jax.lax.scan(step, ((z0, zd0), q0), u)
    return jax.tree.map(lambda first, rest: jnp.concatenate([first[None], rest]),
                        (q0, qd0, z0, zd0), traj)


def project_to_manifold(mech: Mechanism, q, qd, iterations=3):
    """Coordinate projection of (q (n,), q' (n,)) onto Phi(q) = 0 and Phi_q q' = 0.

    Gauss-Newton steps of the least-norm correction q <- q - A^T (A A^T)^-1 Phi(q), A = Phi_q,
    then q' <- q' - A^T (A A^T)^-1 A q' (the orthogonal projection onto the null space of A).
    """
    def newton(_, x):
        a = constraint_jacobian(mech, x)
        return x - a.T @ spd_solve(a @ a.T, constraints(mech, x))
    q = jax.lax.fori_loop(0, iterations, newton, q)
    a = constraint_jacobian(mech, q)
    return q, qd - a.T @ spd_solve(a @ a.T, a @ qd)


def simulate_dependent_rk4(mech, params, q0, qd0, u, dt, substeps=1):
    """Reference simulation that never uses the angle coordinates: RK4 on (q, q') with q''
    from eq 6 (`forward_dynamics_dependent`), each RK4 step followed by a coordinate
    projection onto the constraint manifold (`project_to_manifold`; Hairer, Lubich & Wanner,
    Geometric Numerical Integration, IV.4), so the drift of the index-1 formulation stays at
    round-off and no coordinate can become singular.

    Args:
      q0, qd0: (n,) initial state on the manifold [m, m/s].
      u: (T, nz) torques [N m], held over each output step.
      dt: output step [s]; each is integrated with `substeps` RK4 steps.

    Returns:
      (q, qd): (T + 1, n) trajectories at the output steps.
    """
    h = dt / substeps

    def deriv(state, uk):
        q, qd = state
        return qd, forward_dynamics_dependent(mech, params, q, qd, uk)

    def rk4(state, uk):
        k1 = deriv(state, uk)
        k2 = deriv(jax.tree.map(lambda x, k: x + 0.5 * h * k, state, k1), uk)
        k3 = deriv(jax.tree.map(lambda x, k: x + 0.5 * h * k, state, k2), uk)
        k4 = deriv(jax.tree.map(lambda x, k: x + h * k, state, k3), uk)
        state = jax.tree.map(lambda x, a, b, c, d: x + h / 6 * (a + 2 * b + 2 * c + d),
                             state, k1, k2, k3, k4)
        return project_to_manifold(mech, *state), None

    def step(state, uk):
        state, _ = jax.lax.scan(rk4, state, jnp.broadcast_to(uk, (substeps,) + uk.shape))
        return state, state

    _, traj = jax.lax.scan(step, (q0, qd0), u)
    return jax.tree.map(lambda first, rest: jnp.concatenate([first[None], rest]),
                        (q0, qd0), traj)


# ----------------------------------------------------------------------------- checks


def check_configuration(mech: Mechanism, q, z=None, qd=None, tol=1e-6) -> None:
    """Checks a concrete state (outside traced code) and names the offending constraint.

    Args:
      q: (n,) dependent coordinates [m]; z: (nz,) angle coordinates [rad] or None;
      qd: (n,) velocities [m/s] or None; tol: tolerance on constraint residuals [m, m/s].

    Raises:
      MechanismError: wrong shape; a bar whose length is off (state off the manifold); a
        constraint that is redundant or singular at q (over-constrained or dead-point
        configuration); a velocity violating Phi_q q' = 0.
    """
    q = np.asarray(q, dtype=float)
    if q.shape != (mech.num_coords,):
        raise MechanismError(f'q: expected shape ({mech.num_coords},) (x, y of free points '
                             f'{[mech.point_names[i] for i in mech.free_points]}), got {q.shape}')
    d = np.asarray(bar_vectors(mech, jnp.asarray(q)))
    for k, name in enumerate(mech.bar_names):
        err = abs(np.linalg.norm(d[k]) - mech.bar_lengths[k])
        if err > tol:
            raise MechanismError(f"initial state off the constraint manifold: bar '{name}' has "
                                 f'length {np.linalg.norm(d[k]):.6g} m, expected '
                                 f'{mech.bar_lengths[k]:.6g} m')
    rows = np.asarray(constraint_jacobian(mech, jnp.asarray(q)))
    names = [f"bar '{n}'" for n in mech.bar_names]
    if z is not None:
        z = np.asarray(z, dtype=float)
        h = np.asarray(angle_constraints(mech, jnp.asarray(q), jnp.asarray(z)))
        for c, k in enumerate(mech.angle_bars):
            ang = np.arctan2(d[k, 1], d[k, 0])
            if abs(h[c]) > tol or np.cos(ang - z[c]) < 0:
                raise MechanismError('initial state off the constraint manifold: bar '
                                     f"'{mech.bar_names[k]}' is at angle {ang:.6g} rad, "
                                     f'its coordinate z is {z[c]:.6g} rad')
        g_q, _ = link_jacobians(mech, jnp.asarray(q), jnp.asarray(z))
        rows = np.asarray(g_q)
        names += [f"angle of bar '{mech.bar_names[k]}'" for k in mech.angle_bars]
    scale = max(1.0, float(np.abs(rows).max()))
    rank = 0
    for r in range(rows.shape[0]):
        new_rank = np.linalg.matrix_rank(rows[:r + 1], tol=1e-9 * scale)
        if new_rank == rank:
            raise MechanismError(f'{names[r]}: constraint is redundant or singular at this '
                                 'configuration (over-constrained or dead point; its Jacobian '
                                 'row depends on the rows before it)')
        rank = new_rank
    if qd is not None:
        v = np.asarray(constraint_jacobian(mech, jnp.asarray(q))) @ np.asarray(qd, dtype=float)
        k = int(np.argmax(np.abs(v)))
        if abs(v[k]) > tol * max(1.0, mech.bar_lengths[k]):
            raise MechanismError('initial velocity off the constraint manifold: bar '
                                 f"'{mech.bar_names[k]}' stretches at {v[k]:.6g} m^2/s")
