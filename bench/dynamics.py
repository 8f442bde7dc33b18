"""Throughput of the JAX dynamics beside Pinocchio: ABA, RNEA and rollout gradients.

For the planar double pendulum and the 7-DOF Panda (fingers locked) it prints, per batch of
particles (each particle has its own `Params` and state; one jitted call evaluates the batch):

  * ABA and RNEA evaluations per second;
  * rollout gradients: a 100-step semi-implicit Euler rollout (viscous actuator), a squared
    loss on the joint positions, and its gradient with respect to every physical parameter,
    counted in step-gradients per second (particles x steps per second);
  * the compile time of each jitted function;

and beside them, measured in the same run, Pinocchio's `aba` and `rnea` called per particle
from a Python loop and `computeABADerivatives` per call. The JAX results are checked against
Pinocchio before they are timed. The last line is `RESULT dynamics key=value ...`.

Usage:
  python bench/rigid_body.py [--quick] [--devices N]

`--devices N` splits the particle axis over N XLA host devices (XLA runs one computation
mostly on one core, so N = number of cores uses them all); batches smaller than N run on one.
"""

import argparse
import os
import sys
import time


def _parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--quick', action='store_true',
                        help='smaller batches and fewer repeats (a smoke run)')
    parser.add_argument('--devices', type=int, default=1,
                        help='number of XLA host (CPU) devices to shard the batch over')
    return parser.parse_args()


ARGS = _parse_args()
# XLA reads its flags when the CPU backend starts: set the device count before importing jax.
if ARGS.devices > 1:
    os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                               f' --xla_force_host_platform_device_count={ARGS.devices}')
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dataclasses  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pinocchio as pin  # noqa: E402
from jax.sharding import Mesh, PartitionSpec  # noqa: E402

from sysid_ros.core.model import builders  # noqa: E402
from sysid_ros.core.dynamics import rigid_body  # noqa: E402
from sysid_ros.core.dynamics import integrators  # noqa: E402
from sysid_ros.io import model_io  # noqa: E402

jax.config.update('jax_enable_x64', True)

BATCHES = (1, 64, 1024) if ARGS.quick else (1, 64, 1024, 16384)
ROLLOUT_BATCHES = (1, 64, 1024)
ROLLOUT_STEPS = 100
DT = 1e-3
MIN_TIME_S = 0.1 if ARGS.quick else 0.4   # timed calls repeat until this much time passed
MIN_REPEATS = 3
PIN_MODELS = 16                           # distinct Pinocchio models cycled by the loops
TOLERANCE = 1e-9


def _systems():
    """(label, RobotModel, nominal Params) of the benchmarked systems."""
    return [('double_pendulum', *builders.double_pendulum()),
            ('panda', *model_io.load_urdf('example-robot-data:panda'))]


def _particles(params, num, rng):
    """`num` physically consistent perturbations of `params`, stacked on a leading axis."""
    nb = params.inertial.shape[0]
    # Scaling a body's whole inertial vector by a positive factor keeps it physical.
    scale = rng.uniform(0.8, 1.2, size=(num, nb, 1))
    offset = np.concatenate([rng.normal(0.0, 1e-3, (num, nb, 3)),
                             rng.normal(0.0, 1e-2, (num, nb, 3))], axis=-1)
    return dataclasses.replace(
        params,
        inertial=jnp.asarray(np.asarray(params.inertial) * scale),
        placement=jnp.asarray(np.asarray(params.placement) + offset),
        armature=jnp.asarray(rng.uniform(0.0, 0.1, (num, nb))),
        damping=jnp.asarray(rng.uniform(0.0, 0.5, (num, nb))),
        coulomb=jnp.zeros((num, nb)),
        stribeck=jnp.zeros((num, nb, 2)),
        offset=jnp.zeros((num, nb)))


def _take(tree, k):
    return jax.tree.map(lambda x: x[k], tree)


def _batched(fn):
    """jit(f) of a function of batched arrays; with several devices, the particle axis is
    split over them by `shard_map` (each device runs `fn` on its share)."""
    devices = jax.devices()
    if len(devices) == 1:
        return lambda batch: jax.jit(fn)

    mesh = Mesh(np.asarray(devices), ('particles',))
    spec = PartitionSpec('particles')
    sharded = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=spec, out_specs=spec))
    single = jax.jit(fn)

    def choose(batch):
        return sharded if batch % len(devices) == 0 else single
    return choose


def _place(args):
    """Commit the batch to the devices the sharded function expects."""
    devices = jax.devices()
    batch = jax.tree.leaves(args)[0].shape[0]
    if len(devices) == 1 or batch % len(devices):
        return jax.device_put(args, devices[0])
    sharding = jax.sharding.NamedSharding(Mesh(np.asarray(devices), ('particles',)),
                                          PartitionSpec('particles'))
    return jax.device_put(args, sharding)


def _compile_and_time(jitted, args):
    """(compile seconds, seconds per call, outputs) of `jitted(*args)`."""
    args = _place(args)
    start = time.perf_counter()
    compiled = jitted.lower(*args).compile()
    compile_s = time.perf_counter() - start
    out = jax.block_until_ready(compiled(*args))
    times = []
    while len(times) < MIN_REPEATS or sum(times) < MIN_TIME_S:
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    return compile_s, float(np.median(times)), out


def _python_loop_rate(call, num):
    """Calls per second of `call(k)` for k = 0, 1, ... (repeated until MIN_TIME_S)."""
    count, start = 0, time.perf_counter()
    while count < MIN_REPEATS * num or time.perf_counter() - start < MIN_TIME_S:
        for k in range(num):
            call(k)
        count += num
    return count / (time.perf_counter() - start)


def _rollout_loss(model):
    """Squared joint-position error of a rollout against a target trajectory."""
    nv = model.nv

    def loss(params, x0, controls, target):
        states = integrators.rollout(model, params, x0, controls, DT,
                                     integrator='semi_implicit_euler', actuator='viscous')
        return jnp.sum((states[1:, :nv] - target) ** 2)
    return loss


def _bench_system(label, model, nominal, rng):
    """Rows of the table for one system, plus Pinocchio's rates and headline figures."""
    nv = model.nv
    largest = max(BATCHES)
    params = _particles(nominal, largest, rng)
    q, qd, tau, qdd = (jnp.asarray(rng.normal(size=(largest, nv))) for _ in range(4))
    controls = jnp.asarray(rng.normal(size=(largest, ROLLOUT_STEPS, nv)))
    target = jnp.asarray(rng.normal(size=(largest, ROLLOUT_STEPS, nv)) * 0.1)

    # Pinocchio references: one model per particle for the first PIN_MODELS particles.
    pin_models = [model_io.to_pinocchio(model, _take(params, k)) for k in range(PIN_MODELS)]
    pin_datas = [m.createData() for m in pin_models]
    qp = np.stack([model_io.pinocchio_configuration(model, x) for x in np.asarray(q)])
    qd_np, tau_np, qdd_np = (np.asarray(x) for x in (qd, tau, qdd))

    def pin_aba(k):
        return pin.aba(pin_models[k % PIN_MODELS], pin_datas[k % PIN_MODELS],
                       qp[k], qd_np[k], tau_np[k])

    def pin_rnea(k):
        return pin.rnea(pin_models[k % PIN_MODELS], pin_datas[k % PIN_MODELS],
                        qp[k], qd_np[k], qdd_np[k])

    def pin_aba_derivatives(k):
        return pin.computeABADerivatives(pin_models[k % PIN_MODELS], pin_datas[k % PIN_MODELS],
                                         qp[k], qd_np[k], tau_np[k])

    num_pin = 1024
    pin_rates = dict(aba=_python_loop_rate(pin_aba, num_pin),
                     rnea=_python_loop_rate(pin_rnea, num_pin),
                     aba_derivatives=_python_loop_rate(pin_aba_derivatives, num_pin))

    aba_fn = _batched(jax.vmap(lambda p, a, b, c: rigid_body.aba(model, p, a, b, c)))
    rnea_fn = _batched(jax.vmap(lambda p, a, b, c: rigid_body.rnea(model, p, a, b, c)))
    grad_fn = _batched(jax.vmap(jax.grad(_rollout_loss(model))))
    x0 = jnp.concatenate([q, qd], axis=-1)

    rows, error = [], 0.0
    for batch in sorted(set(BATCHES) | set(ROLLOUT_BATCHES)):
        sub = lambda x: x[:batch]  # noqa: E731
        p_b = jax.tree.map(sub, params)
        row = dict(system=label, batch=batch)
        if batch in BATCHES:
            c, t, out = _compile_and_time(aba_fn(batch), (p_b, sub(q), sub(qd), sub(tau)))
            row.update(aba=batch / t, aba_compile=c)
            error = max(error, max(np.abs(np.asarray(out[k]) - pin_aba(k)).max()
                                   for k in range(min(batch, PIN_MODELS))))
            c, t, out = _compile_and_time(rnea_fn(batch), (p_b, sub(q), sub(qd), sub(qdd)))
            row.update(rnea=batch / t, rnea_compile=c)
            error = max(error, max(np.abs(np.asarray(out[k]) - pin_rnea(k)).max()
                                   for k in range(min(batch, PIN_MODELS))))
        if batch in ROLLOUT_BATCHES:
            c, t, grads = _compile_and_time(
                grad_fn(batch), (p_b, sub(x0), sub(controls), sub(target)))
            finite = all(bool(jnp.isfinite(g).all()) for g in jax.tree.leaves(grads))
            row.update(grad=batch * ROLLOUT_STEPS / t, grad_compile=c, grad_finite=finite)
        rows.append(row)
    return rows, pin_rates, error


def _fmt(value, spec):
    return format(value, spec) if value is not None else '-'


def main():
    rng = np.random.default_rng(0)
    devices = jax.devices()
    print(f'JAX {jax.__version__} on {len(devices)} {devices[0].platform.upper()} device(s), '
          f'{os.cpu_count()} cores, float64; Pinocchio {pin.__version__}; '
          f'rollout: {ROLLOUT_STEPS} semi-implicit Euler steps, dt {DT} s')
    header = (f'{"system":<16}{"batch":>6} | {"ABA/s":>9} {"compile":>7} | {"RNEA/s":>9} '
              f'{"compile":>7} | {"grad step/s":>11} {"compile":>7}')
    results, all_rows = {}, []
    pin_lines = []
    for label, model, nominal in _systems():
        rows, pin_rates, error = _bench_system(label, model, nominal, rng)
        all_rows += rows
        pin_lines.append(
            f'{label:<16} pin.aba loop {pin_rates["aba"]:9.3g}/s | pin.rnea loop '
            f'{pin_rates["rnea"]:9.3g}/s | computeABADerivatives {pin_rates["aba_derivatives"]:9.3g}/s'
            f' | max |JAX - Pinocchio| {error:.1e} ({"ok" if error <= TOLERANCE else "FAIL"})')
        short = 'dp' if label == 'double_pendulum' else label
        for row in rows:
            b = row['batch']
            if 'aba' in row:
                results[f'{short}_aba_{b}'] = row['aba']
                results[f'{short}_rnea_{b}'] = row['rnea']
            if 'grad' in row:
                results[f'{short}_grad_{b}'] = row['grad']
        results[f'{short}_pin_aba'] = pin_rates['aba']
        results[f'{short}_pin_abaderiv'] = pin_rates['aba_derivatives']
        results[f'{short}_max_err'] = error
    print(header)
    print('-' * len(header))
    for row in all_rows:
        print(f'{row["system"]:<16}{row["batch"]:>6} | {_fmt(row.get("aba"), "9.3g")} '
              f'{_fmt(row.get("aba_compile"), "7.1f")} | {_fmt(row.get("rnea"), "9.3g")} '
              f'{_fmt(row.get("rnea_compile"), "7.1f")} | {_fmt(row.get("grad"), "11.3g")} '
              f'{_fmt(row.get("grad_compile"), "7.1f")}'
              + ('' if row.get('grad_finite', True) else '  non-finite gradient!'))
    print('Pinocchio (C++ called per particle from Python), same run:')
    for line in pin_lines:
        print('  ' + line)
    compile_max = max(v for row in all_rows for k, v in row.items() if k.endswith('_compile'))
    results['max_compile_s'] = compile_max
    results['devices'] = len(devices)
    print('RESULT dynamics ' + ' '.join(
        f'{k}={v:.4g}' if isinstance(v, float) else f'{k}={v}' for k, v in results.items()))


if __name__ == '__main__':
    main()
