"""Throughput of the JAX dynamics beside Pinocchio: ABA, RNEA and rollout gradients.

For the planar double pendulum and the 7-DOF Panda (fingers locked) it prints, per batch of
particles (each particle has its own `Params` and state; one jitted call evaluates the batch):

  * ABA and RNEA evaluations per second;
  * rollout gradients: a 100-step semi-implicit Euler rollout (viscous actuator), a squared
    loss on the joint positions, and its gradient with respect to every physical parameter,
    counted in step-gradients per second (particles x steps per second), once vmapped over the
    whole batch and once chunked (`lax.map` over vmapped chunks of GRAD_CHUNK particles, a
    working set that stays in cache);
  * the compile time of each jitted function;

and beside them, measured in the same run, the peers at a batch of 1024 states:

  * Pinocchio's `aba` and `rnea` called per particle from a Python loop and
    `computeABADerivatives` per call (each of 16 particles with its own model);
  * Pinocchio's OpenMP `abaInParallel` on PEER_THREADS threads. Its `ModelPool` copies one
    model per thread, so every state of the batch uses the same parameters (the first
    particle's), where the JAX batch has a parameter set per particle;
  * MuJoCo's batched `rollout` (PEER_THREADS threads), one `MjModel` per particle compiled from
    the particle's URDF (armature, damping, motors; contacts and limits off), 100 steps of
    MuJoCo's Euler integrator (semi-implicit, implicit damping) at dt, in steps per second:
    a whole simulation step per count (kinematics, mass matrix, factorisation, integration),
    forward only, since MuJoCo's C library has no parameter gradients;
  * frax (a JAX rigid-body library, when installed) for the Panda: `forward_dynamics` (CRBA +
    RNEA + Cholesky) of its own Panda URDF, `jit(vmap)` over states; its link parameters are
    NumPy constants of the robot object, so one model serves the whole batch.

The JAX results are checked against Pinocchio, abaInParallel, MuJoCo's accelerations and frax
against Pinocchio on frax's URDF before they are timed. The last line is
`RESULT dynamics key=value ...`.

Usage:
  python -m bench.dynamics [--quick] [--devices N]

`--devices N` splits the particle axis over N XLA host devices (XLA runs one computation
mostly on one core, so N = number of cores uses them all); batches smaller than N run on one.
"""

import argparse
import importlib.util
import os
import time
import warnings


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

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, PartitionSpec  # noqa: E402
import numpy as np  # noqa: E402
import pinocchio as pin  # noqa: E402

from bench import batched_dynamics  # noqa: E402
from sysid_ros.core.dynamics import integrators  # noqa: E402
from sysid_ros.core.dynamics import rigid_body  # noqa: E402
from sysid_ros.core.model import builders  # noqa: E402
from sysid_ros.io import model_io, urdf_export  # noqa: E402

try:
    import mujoco  # noqa: E402
    import mujoco.rollout  # noqa: E402
except ImportError:  # pragma: no cover - environment
    mujoco = None

jax.config.update('jax_enable_x64', True)

BATCHES = (1, 64, 1024) if ARGS.quick else (1, 64, 1024, 16384)
ROLLOUT_BATCHES = (1, 64, 1024)
GRAD_CHUNK = 16                           # particles per vmapped chunk of the chunked gradient
ROLLOUT_STEPS = batched_dynamics.ROLLOUT_STEPS
DT = batched_dynamics.DT
MIN_TIME_S = 0.1 if ARGS.quick else 0.4   # timed calls repeat until this much time passed
MIN_REPEATS = batched_dynamics.MIN_REPEATS
PIN_MODELS = 16                           # distinct Pinocchio models cycled by the loops
TOLERANCE = 1e-9
PEER_BATCH = 1024                         # states per call of the batched peers
PEER_THREADS = 2                          # OpenMP / MuJoCo threads of the batched peers
COLUMNS = ((('aba', '9.3g'), ('aba_compile', '7.1f')),
           (('rnea', '9.3g'), ('rnea_compile', '7.1f')),
           (('grad', '11.3g'), ('grad_compile', '7.1f')),
           (('grad_chunked', '9.3g'), ('grad_chunked_compile', '7.1f')))
MUJOCO_TOLERANCE = 1e-8                   # the URDF that MuJoCo reads prints 17 digits


def _systems():
    """(label, RobotModel, nominal Params) of the benchmarked systems."""
    return [('double_pendulum', *builders.double_pendulum()),
            ('panda', *model_io.load_urdf('example-robot-data:panda'))]


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
    # check_vma off: the chain scans start their carries from unsharded constants.
    sharded = jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=spec, out_specs=spec,
                                    check_vma=False))
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


def _chunked(fn):
    """fn over a leading batch axis as a `lax.map` over vmapped chunks of GRAD_CHUNK rows."""
    return lambda *args: jax.lax.map(lambda row: fn(*row), args, batch_size=GRAD_CHUNK)


def _compile_and_time(jitted, args):
    """(compile seconds, seconds per call, outputs) of `jitted(*args)` on the placed batch."""
    return batched_dynamics.compile_and_time(jitted, _place(args), MIN_TIME_S)


def _python_loop_rate(call, num):
    """Calls per second of `call(k)` for k = 0, 1, ... (repeated until MIN_TIME_S)."""
    count, start = 0, time.perf_counter()
    while count < MIN_REPEATS * num or time.perf_counter() - start < MIN_TIME_S:
        for k in range(num):
            call(k)
        count += num
    return count / (time.perf_counter() - start)


def _seconds_per_call(call):
    """Median wall time [s] of `call()` after one warm-up call (repeated until MIN_TIME_S)."""
    call()
    times = []
    while len(times) < MIN_REPEATS or sum(times) < MIN_TIME_S:
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _pin_parallel(pin_model, qp, qd, tau):
    """(ABA/s, max |abaInParallel - aba|) of Pinocchio's OpenMP ABA over the (B, ...) states.

    The pool holds copies of one model, so the whole batch has `pin_model`'s parameters."""
    pool = pin.ModelPool(pin_model, PEER_THREADS)
    q_cols, v_cols, tau_cols = (np.asfortranarray(x.T) for x in (qp, qd, tau))
    qdd = np.zeros_like(v_cols)

    def call():
        pin.abaInParallel(PEER_THREADS, pool, q_cols, v_cols, tau_cols, qdd)

    seconds = _seconds_per_call(call)
    data = pin_model.createData()
    error = max(np.abs(qdd[:, k] - pin.aba(pin_model, data, qp[k], qd[k], tau[k])).max()
                for k in range(PIN_MODELS))
    return qp.shape[0] / seconds, error


def _mujoco_model(model, params):
    """MjModel of one particle: its URDF, its armature, one motor per joint, Euler at DT."""
    spec = mujoco.MjSpec.from_string(urdf_export.model_to_urdf(model, params))
    spec.option.timestep = DT
    spec.option.integrator = mujoco.mjtIntegrator.mjINT_EULER
    spec.option.disableflags |= (mujoco.mjtDisableBit.mjDSBL_CONTACT
                                 | mujoco.mjtDisableBit.mjDSBL_LIMIT)
    for i, name in enumerate(model.joint_names):
        spec.joint(name).armature = float(params.armature[i])
        spec.add_actuator(name=f'{name}_motor', target=name, trntype=mujoco.mjtTrn.mjTRN_JOINT)
    return spec.compile()


def _mujoco_rollout(model, params, q, qd, controls):
    """(steps/s, max |MuJoCo qacc - JAX forward dynamics|) of MuJoCo's threaded `rollout`.

    Each of the B particles gets its own MjModel (the first PIN_MODELS particles' models,
    cycled); q, qd: (B, nv) initial states; controls: (B, T, nv) motor torques [N m]."""
    distinct = [_mujoco_model(model, _take(params, k)) for k in range(PIN_MODELS)]
    batch, steps = controls.shape[:2]
    models = [distinct[k % PIN_MODELS] for k in range(batch)]
    datas = [mujoco.MjData(distinct[0]) for _ in range(PEER_THREADS)]
    kind = mujoco.mjtState.mjSTATE_FULLPHYSICS
    scratch = mujoco.MjData(distinct[0])
    initial = np.empty((batch, mujoco.mj_stateSize(distinct[0], kind)))
    error = 0.0
    forward = jax.jit(jax.vmap(lambda p, a, b, u: integrators.forward_dynamics(
        model, p, a, b, u, actuator='viscous')))
    reference = np.asarray(forward(_take(params, slice(0, PIN_MODELS)), q[:PIN_MODELS],
                                   qd[:PIN_MODELS], controls[:PIN_MODELS, 0]))
    for k in range(batch):
        mj_model = models[k]
        mujoco.mj_resetData(mj_model, scratch)
        scratch.qpos[:], scratch.qvel[:] = q[k], qd[k]
        mujoco.mj_getState(mj_model, scratch, initial[k], kind)
        if k < PIN_MODELS:
            scratch.ctrl[:] = controls[k, 0]
            mujoco.mj_forward(mj_model, scratch)
            error = max(error, np.abs(scratch.qacc - reference[k]).max())
    controls = np.ascontiguousarray(controls)
    state = np.empty((batch, steps, initial.shape[1]))

    def call():
        mujoco.rollout.rollout(models, datas, initial, controls, state=state)

    return batch * steps / _seconds_per_call(call), error


def _frax_panda(rng):
    """(ABA/s of frax's jit(vmap(forward_dynamics)), max |frax - Pinocchio|) for its Panda,
    or None when frax is not installed."""
    if importlib.util.find_spec('frax') is None:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')          # frax's advice on XLA flags for its own runs
        import frax
        from frax.assets import FRANKA_ASSETS_DIR
    robot = frax.load_panda()
    pin_model = pin.buildModelFromUrdf(str(FRANKA_ASSETS_DIR / 'panda.urdf'))
    q, qd, tau = (rng.normal(size=(PEER_BATCH, robot.nv)) for _ in range(3))
    fn = jax.jit(jax.vmap(lambda a, b, c: robot.forward_dynamics(a, b, c, None)))
    args = tuple(jnp.asarray(x) for x in (q, qd, tau))
    qdd = np.asarray(fn(*args))
    data = pin_model.createData()
    error = max(np.abs(qdd[k] - pin.aba(pin_model, data, q[k], qd[k], tau[k])).max()
                for k in range(PIN_MODELS))
    seconds = _seconds_per_call(lambda: jax.block_until_ready(fn(*args)))
    return PEER_BATCH / seconds, error


def _bench_system(label, model, nominal, rng):
    """Rows of the table for one system, plus Pinocchio's rates and headline figures."""
    nv = model.nv
    largest = max(BATCHES)
    params = batched_dynamics.particles(nominal, largest, rng)
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
    pin_rates = {'aba': _python_loop_rate(pin_aba, num_pin),
                 'rnea': _python_loop_rate(pin_rnea, num_pin),
                 'aba_derivatives': _python_loop_rate(pin_aba_derivatives, num_pin)}
    peer = slice(0, PEER_BATCH)
    pin_rates['aba_parallel'], pin_rates['aba_parallel_error'] = _pin_parallel(
        pin_models[0], qp[peer], qd_np[peer], tau_np[peer])
    if mujoco is not None:
        pin_rates['mj_rollout'], pin_rates['mj_error'] = _mujoco_rollout(
            model, params, np.asarray(q[peer]), qd_np[peer], np.asarray(controls[peer]))

    aba_fn = _batched(jax.vmap(lambda p, a, b, c: rigid_body.aba(model, p, a, b, c)))
    rnea_fn = _batched(jax.vmap(lambda p, a, b, c: rigid_body.rnea(model, p, a, b, c)))
    grad_fn = _batched(jax.vmap(jax.grad(batched_dynamics.rollout_loss(model))))
    chunked_fn = _batched(_chunked(jax.grad(batched_dynamics.rollout_loss(model))))
    x0 = jnp.concatenate([q, qd], axis=-1)

    rows, error = [], 0.0
    for batch in sorted(set(BATCHES) | set(ROLLOUT_BATCHES)):
        sub = lambda x: x[:batch]  # noqa: E731
        p_b = jax.tree.map(sub, params)
        row = {'system': label, 'batch': batch}
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
            rollout_args = (p_b, sub(x0), sub(controls), sub(target))
            c, t, grads = _compile_and_time(grad_fn(batch), rollout_args)
            finite = all(bool(jnp.isfinite(g).all()) for g in jax.tree.leaves(grads))
            row.update(grad=batch * ROLLOUT_STEPS / t, grad_compile=c, grad_finite=finite)
            if batch > GRAD_CHUNK:
                c, t, chunked = _compile_and_time(chunked_fn(batch), rollout_args)
                row.update(grad_chunked=batch * ROLLOUT_STEPS / t, grad_chunked_compile=c)
                row['grad_chunked_error'] = max(
                    float(jnp.abs(a - b).max() / (1.0 + jnp.abs(a).max()))
                    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(chunked)))
        rows.append(row)
    return rows, pin_rates, error


def _verdict(error, tolerance):
    return 'ok' if error <= tolerance else 'FAIL'


def main():
    rng = np.random.default_rng(0)
    devices = jax.devices()
    print(f'JAX {jax.__version__} on {len(devices)} {devices[0].platform.upper()} device(s), '
          f'{os.cpu_count()} cores, float64; Pinocchio {pin.__version__}; '
          f'rollout: {ROLLOUT_STEPS} semi-implicit Euler steps, dt {DT} s')
    header = (f'{"system":<16}{"batch":>6} | {"ABA/s":>9} {"compile":>7} | {"RNEA/s":>9} '
              f'{"compile":>7} | {"grad step/s":>11} {"compile":>7} | {"chunked":>9} '
              f'{"compile":>7}')
    results, all_rows = {}, []
    pin_lines = []
    for label, model, nominal in _systems():
        rows, pin_rates, error = _bench_system(label, model, nominal, rng)
        all_rows += rows
        rates = pin_rates
        pin_lines.append(
            f'{label:<16} pin.aba loop {rates["aba"]:9.3g}/s | pin.rnea loop '
            f'{rates["rnea"]:9.3g}/s | computeABADerivatives {rates["aba_derivatives"]:9.3g}/s'
            f' | max |JAX - Pinocchio| {error:.1e} ({_verdict(error, TOLERANCE)})')
        parallel_error = rates['aba_parallel_error']
        pin_lines.append(
            f'{"":<16} abaInParallel ({PEER_THREADS} threads, batch {PEER_BATCH}, one model) '
            f'{rates["aba_parallel"]:9.3g}/s, max |parallel - pin.aba| '
            f'{parallel_error:.1e} ({_verdict(parallel_error, TOLERANCE)})')
        if 'mj_rollout' in rates:
            pin_lines.append(
                f'{"":<16} MuJoCo rollout ({PEER_THREADS} threads, batch {PEER_BATCH}, a model '
                f'per particle) {rates["mj_rollout"]:9.3g} steps/s, max |qacc - JAX| '
                f'{rates["mj_error"]:.1e} ({_verdict(rates["mj_error"], MUJOCO_TOLERANCE)})')
        short = 'dp' if label == 'double_pendulum' else label
        for row in rows:
            b = row['batch']
            if 'aba' in row:
                results[f'{short}_aba_{b}'] = row['aba']
                results[f'{short}_rnea_{b}'] = row['rnea']
            if 'grad' in row:
                results[f'{short}_grad_{b}'] = row['grad']
            if 'grad_chunked' in row:
                results[f'{short}_grad_chunked_{b}'] = row['grad_chunked']
        results[f'{short}_pin_aba'] = pin_rates['aba']
        results[f'{short}_pin_abaderiv'] = pin_rates['aba_derivatives']
        results[f'{short}_max_err'] = error
        results[f'{short}_pin_aba_parallel'] = pin_rates['aba_parallel']
        if 'mj_rollout' in pin_rates:
            results[f'{short}_mj_rollout'] = pin_rates['mj_rollout']
    frax_rate = _frax_panda(rng)
    if frax_rate is not None:
        results['panda_frax_aba'], frax_error = frax_rate
        pin_lines.append(
            f'{"panda":<16} frax jit(vmap(forward_dynamics)) (batch {PEER_BATCH}, one model, its '
            f'own URDF) {frax_rate[0]:9.3g}/s, max |frax - Pinocchio| {frax_error:.1e} '
            f'({_verdict(frax_error, TOLERANCE)})')
    print(header)
    print('-' * len(header))
    for row, line in zip(all_rows, batched_dynamics.table_lines(all_rows, COLUMNS, 6)):
        print(line + ('' if row.get('grad_finite', True) else '  non-finite gradient!'))
    chunk_error = max(row.get('grad_chunked_error', 0.0) for row in all_rows)
    print(f'chunked: lax.map over chunks of {GRAD_CHUNK} particles; max |chunked - vmapped| / '
          f'(1 + max |vmapped|) {chunk_error:.1e} ({_verdict(chunk_error, TOLERANCE)})')
    print('Peers, same run:')
    for line in pin_lines:
        print('  ' + line)
    compile_max = max(v for row in all_rows for k, v in row.items() if k.endswith('_compile'))
    results['max_compile_s'] = compile_max
    results['devices'] = len(devices)
    print('RESULT dynamics ' + ' '.join(
        f'{k}={v:.4g}' if isinstance(v, float) else f'{k}={v}' for k, v in results.items()))


if __name__ == '__main__':
    main()
