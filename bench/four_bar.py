"""Factor-graph dynamics of the seed's four-bar linkage (seed 003, section 7), and online
identification in the graph.

1. Forward dynamics: free fall under gravity from crank angle 0 at rest, simulated by the
   fixed-lag smoother in dependent (Fig 2) and independent (Fig 3) coordinates for window
   lengths 2-10, with GTSAM's batch smoother (Levenberg-Marquardt over the window at every step,
   at most 15 iterations, as in the seed) and its incremental one (iSAM2, the default). RMSE of
   the point coordinates [m] against a reference that is not a factor graph and never uses the
   crank angle: dependent-coordinate RK4 at a 100x finer step with coordinate projection onto
   the constraint manifold. A second reference, independent-coordinate RK4 (position problem
   solved at every stage), is printed beside it as a check. Beside them the seed's Table 1
   and the real-time factor (RTF: simulated seconds per wall second; > 1 is faster than real
   time) of both smoothers.
2. The same over a longer motion (3 s; 1.5 s with --quick): the free fall swings back and forth
   between crank angles 0 and -3.75 rad. This four-bar is a Grashof crank-rocker whose
   transmission angle stays in [56, 124] deg (cos mu = 0.555 cos theta), so the crank angle is a
   regular coordinate everywhere and both references agree to round-off.
3. Inverse dynamics (Fig 4, batch LM with the four-stage initialisation) of the prescribed crank
   angle theta(t) = A (1 - cos 2 pi f t): the crank torque against the closed-form inverse
   dynamics of eq 15 along the exact trajectory, and the following error (seed: < 1 mrad).
4. Online identification (beyond the seed) of the rocker mass and the crank friction from a
   noisy crank encoder (1 mrad) and coupler gyroscope (0.01 rad/s) under a known torque: final
   estimate +- marginal std and the RTF of both smoothers.

The seed gives neither its time step nor its duration; we use dt = 10 ms over 1 s.

Usage:
  python -m bench.four_bar [--quick]

The last line is `RESULT four_bar key=value ...`.
"""

import argparse
import time

import jax

jax.config.update('jax_enable_x64', True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from sysid_ros.core.constrained import mechanisms as mm  # noqa: E402
from sysid_ros.graph import identification as gi  # noqa: E402
from sysid_ros.graph import smoother as sm  # noqa: E402

SEED_TABLE1 = {2: (0.002361, 0.023834), 3: (0.002356, 0.019645), 4: (0.002352, 0.020019),
               5: (0.002348, 0.016647), 6: (0.002344, 0.016677), 7: (0.002341, 0.016677),
               8: (0.002338, 0.016677), 9: (0.002335, 0.017056), 10: (0.002332, 0.016677)}
DT = 0.01
COORDS = ('dependent', 'independent')
SMOOTHERS = ('batch', 'incremental')


def _parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true',
                        help='0.5 s and 1.5 s of motion, windows 2, 5, 10 (a smoke run)')
    return parser.parse_args()


def references(mech, params, q0, steps):
    """(dependent-coordinate reference q (T + 1, n), max |difference| to the independent one)."""
    u = jnp.zeros((steps, 1))
    q_dep = jax.jit(lambda uu: mm.simulate_dependent_rk4(
        mech, params, q0, jnp.zeros(4), uu, DT, substeps=100))(u)[0]
    q_ind = jax.jit(lambda uu: mm.simulate_independent_rk4(
        mech, params, q0, jnp.zeros(1), jnp.zeros(1), uu, DT, substeps=100))(u)[0]
    return np.asarray(q_dep), float(jnp.abs(q_dep - q_ind).max())


def forward_table(mech, params, q0, duration, windows):
    """{(window, coords, smoother): (rmse [m], rtf, mean iterations)} and the reference check."""
    steps = int(round(duration / DT))
    u = np.zeros((steps, 1))
    q_ref, ref_diff = references(mech, params, q0, steps)
    for coords in COORDS:  # compile every factor before timing
        sm.forward_dynamics(mech, params, q0, np.zeros(4), u[:3], DT, 2, coords)
    print(f'\nForward dynamics, free fall from crank angle 0: dt = {DT} s, {duration} s; '
          f'reference: dependent RK4 + projection at dt/100 (max |difference| to the '
          f'independent RK4 reference: {ref_diff:.1e} m)')
    print(f"{'window':>6} | {'DC RMSE [m]':>11} {'batch':>9} {'seed DC':>8} {'RTF b':>6} "
          f"{'RTF i':>6} | {'IC RMSE [m]':>11} {'batch':>9} {'seed IC':>8} {'RTF b':>6} "
          f"{'RTF i':>6}")
    rows = {}
    for window in windows:
        cells = []
        for c, coords in enumerate(COORDS):
            for kind in SMOOTHERS:
                res = sm.forward_dynamics(mech, params, q0, np.zeros(4), u, DT, window, coords,
                                          smoother=kind)
                rmse = float(np.sqrt(np.mean((res.q - q_ref) ** 2)))
                rows[window, coords, kind] = (rmse, duration / res.wall_time,
                                              float(res.iterations.mean()))
            (rb, tb, _), (ri, ti, _) = (rows[window, coords, kind] for kind in SMOOTHERS)
            cells.append(f'{ri:>11.6f} {rb:>9.6f} {SEED_TABLE1[window][c]:>8.6f} {tb:>6.2f} '
                         f'{ti:>6.2f}')
        print(f'{window:>6} | ' + ' | '.join(cells))
    print('RMSE: incremental smoother (iSAM2); batch: Levenberg-Marquardt over the window; '
          'RTF b / RTF i: real-time factor of batch / incremental')
    return rows, ref_diff


def inverse_table(mech, params, q0, duration, amplitude=0.5, freq=0.5):
    t = np.arange(int(round(duration / DT)) + 1) * DT
    w = 2 * np.pi * freq
    z = amplitude * (1 - np.cos(w * t))[:, None]
    zd = amplitude * w * np.sin(w * t)[:, None]
    zdd = amplitude * w**2 * np.cos(w * t)[:, None]
    start = time.perf_counter()
    res = sm.inverse_dynamics(mech, params, z, q0, np.zeros(4), DT)
    wall = time.perf_counter() - start

    def exact(zk, zdk, zddk, q_guess):
        q = mm.solve_position(mech, zk, q_guess)
        qd = mm.velocity_transform(mech, q, zk) @ zdk
        return mm.inverse_dynamics_independent(mech, params, q, qd, zk, zdk, zddk)
    u_ref = np.asarray(jax.jit(jax.vmap(exact))(z, zd, zdd, jnp.asarray(res.q)))
    follow = np.abs(res.z - z)
    interior = slice(1, -1)  # the trapezoidal rule has no information at the two ends
    torque_err = np.abs(res.u - u_ref)[interior]
    print(f'\nInverse dynamics: theta(t) = {amplitude} (1 - cos(2 pi {freq} t)) rad, dt = {DT} s, '
          f'{duration} s, batch LM in four stages ({wall:.1f} s)')
    print(f"{'t [s]':>6} {'theta_des [rad]':>15} {'tau FG [N m]':>13} {'tau eq15 [N m]':>14} "
          f"{'follow err [mrad]':>17}")
    for k in range(0, len(t), max(1, len(t) // 10)):
        print(f'{t[k]:>6.2f} {z[k, 0]:>15.4f} {res.u[k, 0]:>13.4f} {u_ref[k, 0]:>14.4f} '
              f'{1e3 * follow[k, 0]:>17.4f}')
    print('stage errors:', ' '.join(f'{e:.3g}' for e in res.stage_errors))
    return {'follow_max_mrad': 1e3 * float(follow.max()),
            'torque_rms_err': float(np.sqrt(np.mean(torque_err**2))),
            'torque_peak': float(np.abs(u_ref).max()), 'inverse_wall_s': wall}


def identification_table(steps, dt=0.005, window=6):
    """Rocker mass and crank friction from encoder + gyroscope, both smoothers."""
    truth = np.array([4.0, 0.5])
    mech, params, q0 = mm.four_bar(damping=truth[1], masses=(1.0, 2.0, truth[0]))

    def torque(t):
        return (4.0 * np.sin(2 * np.pi * 0.5 * t) + 2.0 * np.sin(2 * np.pi * 1.3 * t))[:, None]
    u, q, _, encoder, gyro = gi.simulate_sensors(mech, params, q0, torque, dt, steps,
                                                 encoder_sigma=1e-3, gyro_bar=1,
                                                 gyro_sigma=1e-2)
    nominal = mm.MechanismParams(params.bar_masses.at[2].set(3.0), params.damping * 0.0)
    print(f'\nOnline identification: {steps * dt:g} s at dt = {dt} s, window {window} steps; '
          f'truth rocker.mass {truth[0]} kg, crank.damping {truth[1]} N m s/rad; prior '
          '3 +- 2 kg, 0.2 +- 1 N m s/rad')
    print(f"{'smoother':>11} {'rocker.mass':>17} {'crank.damping':>17} {'|err|/std':>10} "
          f"{'RTF':>6}")
    out = {}
    for kind in SMOOTHERS:
        def run(num):
            return gi.identify_online(
                mech, nominal, ('rocker.mass', 'crank.damping'), np.array([3.0, 0.2]),
                np.array([2.0, 1.0]), q0, np.zeros(4), u[:num], encoder[:num + 1], dt, window,
                1e-3, gyro=gyro[:num + 1], gyro_bar=1, gyro_sigma=1e-2,
                covariance_every=steps, smoother=kind)
        run(3)  # compile
        res = run(steps)
        mean, std = res.mean[-1], res.std[-1]
        z = np.abs(mean - truth) / std
        out[kind] = (mean, std, steps * dt / res.wall_time)
        print(f'{kind:>11} {mean[0]:>8.4f} +- {std[0]:.4f} {mean[1]:>8.4f} +- {std[1]:.4f} '
              f'{z.max():>10.2f} {out[kind][2]:>6.2f}')
    return out


def main():
    args = _parse_args()
    mech, params, q0 = mm.four_bar()
    duration, long_duration = (0.5, 1.5) if args.quick else (1.0, 3.0)
    windows = (2, 5, 10) if args.quick else tuple(range(2, 11))
    rows, ref_diff = forward_table(mech, params, q0, duration, windows)
    long_rows, long_ref_diff = forward_table(mech, params, q0, long_duration, (2, 5, 10))
    inverse = inverse_table(mech, params, q0, 1.0 if args.quick else 4.0)
    ident = identification_table(120 if args.quick else 240)
    w0, w1 = windows[0], windows[-1]
    fields = dict(
        dt=DT, duration_s=duration, ref_diff_m=max(ref_diff, long_ref_diff),
        dc_rmse_w2=rows[w0, 'dependent', 'incremental'][0],
        dc_rmse_w10=rows[w1, 'dependent', 'incremental'][0],
        ic_rmse_w2=rows[w0, 'independent', 'incremental'][0],
        seed_dc_rmse=0.002361, seed_ic_rmse=0.023834,
        dc_rtf_w2_batch=rows[w0, 'dependent', 'batch'][1],
        dc_rtf_w2=rows[w0, 'dependent', 'incremental'][1],
        dc_rtf_w10_batch=rows[w1, 'dependent', 'batch'][1],
        dc_rtf_w10=rows[w1, 'dependent', 'incremental'][1],
        ic_rtf_w2_batch=rows[w0, 'independent', 'batch'][1],
        ic_rtf_w2=rows[w0, 'independent', 'incremental'][1],
        long_duration_s=long_duration,
        long_dc_rmse_w2=long_rows[2, 'dependent', 'incremental'][0],
        long_dc_rmse_w10=long_rows[10, 'dependent', 'incremental'][0],
        long_ic_rmse_w10=long_rows[10, 'independent', 'incremental'][0],
        **inverse,
        id_mass=ident['incremental'][0][0], id_mass_std=ident['incremental'][1][0],
        id_damping=ident['incremental'][0][1], id_damping_std=ident['incremental'][1][1],
        id_rtf_batch=ident['batch'][2], id_rtf=ident['incremental'][2])
    print('RESULT four_bar ' + ' '.join(f'{k}={v:.4g}' for k, v in fields.items()))


if __name__ == '__main__':
    main()
