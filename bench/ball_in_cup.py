"""Ball in a cup (seed 001 3.3, 4.1.3): identify the string length and the cup anchor from
simulated motion capture of the ball and the arm's joint data.

The arm is a 3-joint ceiling-mounted chain (`ball_in_cup.ceiling_arm`, NOT the seed's Barrett
WAM) following slow cosine joint trajectories that set the ball swinging without slack (as
the seed's string-identification data). Truth: length 0.40 m, anchor (40, -30, -60) mm in
the last body frame, drag 0.05 1/s; ball simulated with RK4 at 1 kHz (closed-form string
force, Baumgarte-stabilised), sampled at 100 Hz with Gaussian noise. Identification: multiple
shooting over 0.3 s windows with free window starts, Levenberg-Marquardt (Schur complement)
from length 0.33 m, anchor 0, drag 0.2 1/s. The seed identified the real string (no numbers
to compare); we report the error against the known truth and the reported standard
deviation. Run: python -m bench.ball_in_cup [--quick]
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.constrained import ball_in_cup as bic

DT = 0.01
HORIZON = 30
AMPLITUDE, FREQUENCY = (0.5, 0.35, 0.35), (0.23, 0.31, 0.37)


def run(samples, noise, seed=0):
    cup = bic.ceiling_arm()
    truth = bic.StringParams(jnp.asarray(0.4), jnp.array([0.04, -0.03, -0.06]),
                             jnp.asarray(0.05))
    data = bic.synthetic_data(cup, truth, samples, DT, AMPLITUDE, FREQUENCY, noise,
                              jax.random.PRNGKey(seed))
    windows = bic.make_windows(data, DT, HORIZON)
    start = bic.StringParams(jnp.asarray(0.33), jnp.zeros(3), jnp.asarray(0.2))
    fit_fn = jax.jit(lambda s: bic.fit_string(cup, windows, s, DT, 20))
    begin = time.perf_counter()
    jax.block_until_ready(fit_fn(start))
    first = time.perf_counter() - begin
    begin = time.perf_counter()
    fit = jax.block_until_ready(fit_fn(start))
    fit_s = time.perf_counter() - begin
    anchor_error = np.abs(np.asarray(fit.string.anchor - truth.anchor))
    return {'samples': samples, 'noise_mm': 1e3 * noise, 'windows': windows.ball.shape[0],
            'length': float(fit.string.length), 'length_true': float(truth.length),
            'length_err_mm': 1e3 * abs(float(fit.string.length - truth.length)),
            'length_std_mm': 1e3 * float(fit.std.length),
            'anchor_err_mm': 1e3 * anchor_error.max(),
            'anchor_std_mm': 1e3 * float(np.max(fit.std.anchor)),
            'drag': float(fit.string.drag), 'drag_std': float(fit.std.drag),
            'rms0_mm': 1e3 * float(fit.rms0), 'rms_mm': 1e3 * float(fit.rms),
            'compile_s': first - fit_s, 'fit_s': fit_s}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--quick', action='store_true', help='one case: 6 s, 1 mm noise')
    args = parser.parse_args()
    jax.config.update('jax_enable_x64', True)
    cases = [(600, 1e-3)] if args.quick else [(600, 1e-3), (1500, 0.5e-3), (1500, 1e-3),
                                              (1500, 2e-3), (3000, 1e-3)]
    rows = [run(samples, noise) for samples, noise in cases]
    keys = ('samples', 'noise_mm', 'windows', 'length', 'length_err_mm', 'length_std_mm',
            'anchor_err_mm', 'anchor_std_mm', 'drag', 'drag_std', 'rms0_mm', 'rms_mm',
            'compile_s', 'fit_s')
    print('truth: length 0.4 m, anchor (40, -30, -60) mm, drag 0.05 1/s; start: 0.33 m, '
          '(0, 0, 0), 0.2 1/s; 100 Hz, 0.3 s windows, 20 LM iterations')
    print(' '.join(f'{k:>13}' for k in keys))
    for r in rows:
        print(' '.join(f'{r[k]:>13.4g}' if isinstance(r[k], float) else f'{r[k]:>13}'
                       for k in keys))
    head = rows[-1]
    print(f"RESULT ball_in_cup samples={head['samples']} noise_mm={head['noise_mm']:.2f} "
          f"length={head['length']:.5f} length_true={head['length_true']} "
          f"length_err_mm={head['length_err_mm']:.3f} "
          f"length_std_mm={head['length_std_mm']:.3f} "
          f"anchor_err_mm={head['anchor_err_mm']:.3f} "
          f"anchor_std_mm={head['anchor_std_mm']:.3f} rms_mm={head['rms_mm']:.3f} "
          f"fit_s={head['fit_s']:.2f} compile_s={head['compile_s']:.1f}")


if __name__ == '__main__':
    main()
