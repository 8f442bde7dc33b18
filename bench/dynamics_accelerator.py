"""Throughput of the pure-JAX dynamics on JAX's default backend (a GPU where there is one).

The pure-JAX path is the accelerator path: this measures it, batch by batch, on
the same work as `dynamics.py` (per-particle parameters, float64):

  * ABA evaluations per second at batches up to BATCHES[-1];
  * rollout gradients: a ROLLOUT_STEPS semi-implicit Euler rollout, its squared loss and the
    gradient with respect to every physical parameter, vmapped, in step-gradients per second;
  * the compile time of each jitted function.

Before timing, each result is checked against the same jitted function on the host CPU
(the path that the tests check against Pinocchio to 1e-9): ABA within 1e-9, gradients within
1e-9 relative to their largest entry. The last line is `RESULT dynamics_accelerator ...`.

Pinocchio (which loads the Panda's URDF) is often missing on an accelerator machine, so the
models travel as a pickle made where it is installed:

  python -m bench.dynamics_accelerator --export models.pkl       # here: needs Pinocchio
  python -m bench.dynamics_accelerator --models models.pkl       # there: JAX only

Without `--models` only the double pendulum (built in JAX) is measured.
"""

import argparse
import pickle

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from bench import batched_dynamics
from sysid_ros.core.dynamics import rigid_body  # noqa: E402
from sysid_ros.core.model import builders  # noqa: E402

jax.config.update('jax_enable_x64', True)

BATCHES = (1024, 16384, 131072)
GRAD_BATCHES = (64, 1024, 16384)
QUICK = ((1024,), (64,))
COLUMNS = ((('aba', '9.3g'), ('aba_compile', '7.1f'), ('aba_error', '8.1e')),
           (('grad', '11.3g'), ('grad_compile', '7.1f'), ('grad_error', '8.1e')))
CHECKED = 16                  # particles compared with the CPU
TOLERANCE = 1e-9
MIN_TIME_S = 0.5


def _export(path):
    from sysid_ros.io import model_io
    models = {'double_pendulum': builders.double_pendulum(),
              'panda': model_io.load_urdf('example-robot-data:panda')}
    with open(path, 'wb') as f:
        pickle.dump({k: (m, jax.tree.map(np.asarray, p)) for k, (m, p) in models.items()}, f)
    print(f'wrote {path}: {", ".join(models)}')


def _systems(path):
    if path is None:
        return {'double_pendulum': builders.double_pendulum()}
    with open(path, 'rb') as f:
        return {k: (m, jax.tree.map(jnp.asarray, p)) for k, (m, p) in pickle.load(f).items()}


def _on_cpu(fn, args):
    """fn(*args[:CHECKED rows]) jitted on the host CPU: the reference of every batch, whose
    first CHECKED particles are the same."""
    cpu = jax.devices('cpu')[0]
    head = jax.device_put(jax.tree.map(lambda x: x[:CHECKED], args), cpu)
    return jax.jit(fn)(*head)


def _error(fast, reference, relative):
    """max |fast - reference| over the checked rows, relative to max |reference| if asked."""
    worst = 0.0
    for a, b in zip(jax.tree.leaves(fast), jax.tree.leaves(reference)):
        a, b = np.asarray(a)[:CHECKED], np.asarray(b)
        scale = 1.0 + np.abs(b).max() if relative else 1.0
        worst = max(worst, float(np.abs(a - b).max() / scale))
    return worst


def _bench(label, model, nominal, rng, sizes, rows, results):
    batches, grad_batches = sizes
    nv = model.nv
    largest = max(batches + grad_batches)
    params = batched_dynamics.particles(nominal, largest, rng)
    q, qd, tau = (jnp.asarray(rng.normal(size=(largest, nv))) for _ in range(3))
    x0 = jnp.concatenate([q, qd], axis=-1)
    controls = jnp.asarray(rng.normal(size=(largest, batched_dynamics.ROLLOUT_STEPS, nv)))
    target = 0.1 * jnp.asarray(rng.normal(size=controls.shape))
    aba = jax.vmap(lambda p, a, b, c: rigid_body.aba(model, p, a, b, c))
    grad = jax.vmap(jax.grad(batched_dynamics.rollout_loss(model)))
    aba_reference = _on_cpu(aba, (params, q, qd, tau))
    grad_reference = _on_cpu(grad, (params, x0, controls, target))
    short = 'dp' if label == 'double_pendulum' else label
    for batch in sorted(set(batches) | set(grad_batches)):
        sub = jax.tree.map(lambda x: x[:batch], (params, q, qd, tau, x0, controls, target))
        p_b, q_b, qd_b, tau_b, x0_b, u_b, target_b = sub
        row = {'system': label, 'batch': batch}
        if batch in batches:
            args = (p_b, q_b, qd_b, tau_b)
            c, t, out = batched_dynamics.compile_and_time(jax.jit(aba), args, MIN_TIME_S)
            error = _error(out, aba_reference, relative=False)
            row.update(aba=batch / t, aba_compile=c, aba_error=error)
            results[f'{short}_aba_{batch}'] = batch / t
        if batch in grad_batches:
            args = (p_b, x0_b, u_b, target_b)
            c, t, out = batched_dynamics.compile_and_time(jax.jit(grad), args, MIN_TIME_S)
            error = _error(out, grad_reference, relative=True)
            rate = batch * batched_dynamics.ROLLOUT_STEPS / t
            row.update(grad=rate, grad_compile=c, grad_error=error)
            results[f'{short}_grad_{batch}'] = rate
        rows.append(row)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--export', metavar='PATH', help='write the models pickle and stop')
    parser.add_argument('--models', metavar='PATH', help='the models pickle to measure')
    parser.add_argument('--quick', action='store_true',
                        help=f'batches {QUICK[0]} and {QUICK[1]} only (a smoke run)')
    args = parser.parse_args()
    if args.export:
        _export(args.export)
        return
    device = jax.devices()[0]
    print(f'JAX {jax.__version__} on {device.platform.upper()} ({device.device_kind}), float64;'
          f' checked against the host CPU on {CHECKED} particles')
    rng = np.random.default_rng(0)
    rows, results = [], {}
    sizes = QUICK if args.quick else (BATCHES, GRAD_BATCHES)
    for label, (model, nominal) in _systems(args.models).items():
        _bench(label, model, nominal, rng, sizes, rows, results)
    header = (f'{"system":<16}{"batch":>7} | {"ABA/s":>9} {"compile":>7} {"|err|":>8} | '
              f'{"grad step/s":>11} {"compile":>7} {"rel err":>8}')
    print(header)
    print('-' * len(header))
    for line in batched_dynamics.table_lines(rows, COLUMNS, 7):
        print(line)
    worst = max(v for row in rows for k, v in row.items() if k.endswith('_error'))
    print(f'max error against the CPU: {worst:.1e} ({"ok" if worst <= TOLERANCE else "FAIL"})')
    results['max_error'] = worst
    results['max_compile_s'] = max(v for row in rows for k, v in row.items()
                                   if k.endswith('_compile'))
    results['platform'] = device.platform
    print('RESULT dynamics_accelerator ' + ' '.join(
        f'{k}={v:.4g}' if isinstance(v, float) else f'{k}={v}' for k, v in results.items()))


if __name__ == '__main__':
    main()
