"""Factor-graph dynamics of the seed's four-bar linkage (seed 003, section 7).

1. Forward dynamics: free fall under gravity from crank angle 0 at rest, simulated by the
   fixed-lag smoother (LM, at most 15 iterations) in dependent (Fig 2) and independent (Fig 3)
   coordinates for window lengths 2-10. RMSE of the point coordinates [m] against a reference
   that is not a factor graph: independent-coordinate RK4 with a 100x finer step and the
   position problem solved at every stage. Beside it the seed's Table 1, the wall time and the
   real-time factor (simulated seconds per wall second; > 1 is faster than real time).
2. Inverse dynamics (Fig 4, batch LM with the four-stage initialisation) of the prescribed crank
   angle theta(t) = A (1 - cos 2 pi f t): the crank torque against the closed-form inverse
   dynamics of eq 15 along the exact trajectory, and the following error (seed: < 1 mrad).

The seed gives neither its time step nor its duration; we use dt = 10 ms over 1 s. Longer runs
are not yet trustworthy: the free fall turns at a crank angle of about -3.75 rad near t = 1 s,
close to a coupler-rocker toggle where the crank angle is a singular independent coordinate (the
independent-coordinate graph became indeterminate at t = 1.46 s in a 5 s run, and the reference,
itself in independent coordinates, is suspect there).

Usage:
  python bench/four_bar.py [--quick]

The last line is `RESULT four_bar key=value ...`.
"""

import argparse
import time

import jax

jax.config.update('jax_enable_x64', True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from sysid_ros.core import mechanisms as mm  # noqa: E402
from sysid_ros.graph import smoother as sm  # noqa: E402

SEED_TABLE1 = {2: (0.002361, 0.023834), 3: (0.002356, 0.019645), 4: (0.002352, 0.020019),
               5: (0.002348, 0.016647), 6: (0.002344, 0.016677), 7: (0.002341, 0.016677),
               8: (0.002338, 0.016677), 9: (0.002335, 0.017056), 10: (0.002332, 0.016677)}
DT = 0.01


def _parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true',
                        help='0.5 s of motion, windows 2, 5, 10 (a smoke run)')
    return parser.parse_args()


def forward_table(mech, params, q0, duration, windows):
    steps = int(round(duration / DT))
    u = np.zeros((steps, 1))
    ref = jax.jit(lambda uu: mm.simulate_independent_rk4(
        mech, params, q0, jnp.zeros(1), jnp.zeros(1), uu, DT, substeps=100))(jnp.asarray(u))
    q_ref = np.asarray(ref[0])
    for coords in ('dependent', 'independent'):  # compile every factor before timing
        sm.forward_dynamics(mech, params, q0, np.zeros(4), u[:3], DT, 2, coords)
    print(f'Forward dynamics, free fall from crank angle 0: dt = {DT} s, {duration} s, '
          'reference RK4 at dt/100')
    print(f"{'window':>6} | {'DC RMSE [m]':>11} {'seed DC':>8} {'RTF':>6} {'iters':>5} | "
          f"{'IC RMSE [m]':>11} {'seed IC':>8} {'RTF':>6} {'iters':>5}")
    rows = {}
    for window in windows:
        cells = []
        for coords in ('dependent', 'independent'):
            res = sm.forward_dynamics(mech, params, q0, np.zeros(4), u, DT, window, coords)
            rmse = float(np.sqrt(np.mean((res.q - q_ref) ** 2)))
            cells.append((rmse, duration / res.wall_time, float(res.iterations.mean())))
        rows[window] = cells
        (dc, dc_rtf, dc_it), (ic, ic_rtf, ic_it) = cells
        seed_dc, seed_ic = SEED_TABLE1[window]
        print(f'{window:>6} | {dc:>11.6f} {seed_dc:>8.6f} {dc_rtf:>6.2f} {dc_it:>5.1f} | '
              f'{ic:>11.6f} {seed_ic:>8.6f} {ic_rtf:>6.2f} {ic_it:>5.1f}')
    return rows


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
    return dict(follow_max_mrad=1e3 * float(follow.max()),
                torque_rms_err=float(np.sqrt(np.mean(torque_err**2))),
                torque_peak=float(np.abs(u_ref).max()), inverse_wall_s=wall)


def main():
    args = _parse_args()
    mech, params, q0 = mm.four_bar()
    duration = 0.5 if args.quick else 1.0
    windows = (2, 5, 10) if args.quick else tuple(range(2, 11))
    rows = forward_table(mech, params, q0, duration, windows)
    inverse = inverse_table(mech, params, q0, 1.0 if args.quick else 4.0)
    best = min(windows, key=lambda wdw: rows[wdw][0][0])
    print('RESULT four_bar '
          + f'dt={DT} duration_s={duration} '
          + f'dc_rmse_w2={rows[windows[0]][0][0]:.6f} dc_rmse_best={rows[best][0][0]:.6f} '
          + f'ic_rmse_w2={rows[windows[0]][1][0]:.6f} '
          + f'seed_dc_rmse=0.002361 seed_ic_rmse=0.023834 '
          + f'dc_rtf_w2={rows[windows[0]][0][1]:.3f} dc_rtf_w10={rows[windows[-1]][0][1]:.3f} '
          + f'ic_rtf_w2={rows[windows[0]][1][1]:.3f} '
          + ' '.join(f'{k}={v:.4g}' for k, v in inverse.items()))


if __name__ == '__main__':
    main()
