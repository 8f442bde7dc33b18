"""How far the output error's model is from `sim_robot`'s data at the truth, by how the
estimator reads the torques (no ROS: the same model, excitation and integration offline).

`sim_robot` integrates RK4 at `--sim-rate` under commands held from each of their stamps
(the sum of sines of `simulation.excitation`), and the live estimator reads the stamps'
values at `data.rate` as `instantaneous` samples. For each way of turning those samples into
the model's input, each 1 s window is simulated from its true start state with the true
parameters, RK4 at `--substeps` steps per sample, and the RMS error of the joint velocities
is printed in noise stds (`--noise`; `sim_robot`'s default 1e-3 rad/s):

  instantaneous            each period the mean of its two ends' stamp values (shipped)
  instantaneous, FOH       the stamp values linearly interpolated within the period
  half period early        the values at stamp - 1 / (2 sim_rate) (a held command's centre),
                           mean of the ends
  half period early, FOH   the same, linearly interpolated
  period means             each period's exact mean command, held
  held stamp values        the stamp values held over the period (`torque_samples: held`)

    python -m bench.torque_timing [--config config/double_pendulum_live.yaml] [--seeds 0 1]
                                  [--quick]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.model import edits
from sysid_ros.io import config as config_io
from sysid_ros.io import pipeline, simulation

WINDOW_S = 1.0          # [s], the live windows' length
FOH_STEPS = 8           # piecewise-constant steps per sample that approximate the linear hold


def truth_and_commands(problem, seed: int, duration: float, sim_rate: float):
    """(true params, (S, nv) commands held over each 1 / sim_rate, (S + 1, 2 nv) states) as
    `sim_robot` makes them (perturbation 0.2, true damping 0.1, torque scale 1)."""
    model, base = problem.model, problem.base_params
    truth = edits.perturb_params(base, seed, 0.2, 0.1, 0.0)
    truth = problem.spec.to_params(problem.spec.from_params(truth), base)
    scale = pipeline.typical_torque(model, truth, np.random.default_rng([seed, 1]))
    steps = int(round(duration * sim_rate))
    commands = simulation.excitation(np.arange(steps) / sim_rate, scale,
                                     np.random.default_rng([seed, 2]))
    cfg = problem.config
    states = simulation.rollout(model, truth, jnp.zeros(2 * model.nv), jnp.asarray(commands),
                                1.0 / sim_rate, integrator='rk4', actuator=cfg.model.actuator)
    return truth, commands, np.asarray(states)


def window_error(problem, truth, states, inputs, dt: float, substeps: int) -> float:
    """RMS joint-velocity error of every 1 s window simulated from its true start under
    `inputs` (T, nv) at period dt / substeps per input [rad/s]; `states` (N, 2 nv) at dt."""
    nv, cfg = problem.model.nv, problem.config
    per_sample = inputs.shape[0] // (states.shape[0] - 1)
    n = int(round(WINDOW_S / dt))
    errors = []
    for w in range(0, states.shape[0] - n - 1, n):
        pred = simulation.rollout(problem.model, truth, jnp.asarray(states[w]),
                                  jnp.asarray(inputs[w * per_sample:(w + n) * per_sample]),
                                  dt / per_sample, integrator='rk4',
                                  actuator=cfg.model.actuator,
                                  substeps=substeps if per_sample == 1 else 1)
        errors.append(np.asarray(pred)[::per_sample, nv:] - states[w:w + n + 1, nv:])
    return float(np.sqrt(np.mean(np.square(np.concatenate(errors)))))


def readings(commands, sim_rate: float, rate: float) -> dict[str, tuple[np.ndarray, bool]]:
    """{row: ((N, nv) values at the samples, linear hold?)} (module doc)."""
    ratio = int(round(sim_rate / rate))
    stamps = np.arange(0, commands.shape[0] + 1, ratio)
    padded = np.concatenate([commands[:1], commands, commands[-1:]])
    at_stamp = padded[stamps + 1]                            # held from the stamp on
    early = 0.5 * (padded[stamps] + padded[stamps + 1])      # half a command period before
    means = np.stack([commands[k:k + ratio].mean(axis=0) for k in stamps[:-1]]
                     + [commands[-1]])
    return {'instantaneous': (at_stamp, False), 'instantaneous, FOH': (at_stamp, True),
            'half period early': (early, False), 'half period early, FOH': (early, True),
            'period means': (means, None), 'held stamp values': (at_stamp, None)}


def model_inputs(values: np.ndarray, linear: bool | None, dt: float) -> np.ndarray:
    """The model's input from sample values (N, nv): held as they are (None), the mean of
    each period's ends (False), or linearly interpolated at FOH_STEPS midpoints (True)."""
    if linear is None:
        return values[:-1]
    if not linear:
        return 0.5 * (values[:-1] + values[1:])
    t = np.arange(values.shape[0]) * dt
    fine = (np.arange((values.shape[0] - 1) * FOH_STEPS) + 0.5) * dt / FOH_STEPS
    return np.stack([np.interp(fine, t, column) for column in values.T], axis=1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--config', default='config/double_pendulum_live.yaml')
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1])
    parser.add_argument('--sim-rate', type=float, default=1000.0, help='[Hz]')
    parser.add_argument('--duration', type=float, default=20.0, help='[s]')
    parser.add_argument('--substeps', type=int, default=8)
    parser.add_argument('--noise', type=float, default=1e-3, help='[rad/s]')
    parser.add_argument('--quick', action='store_true', help='one seed, 10 s')
    args = parser.parse_args(argv)
    if args.quick:
        args.seeds, args.duration = args.seeds[:1], 10.0
    jax.config.update('jax_enable_x64', True)
    problem = pipeline.build_problem(config_io.load_yaml(args.config))
    rate = problem.config.data.rate
    dt = 1.0 / rate
    table = {}
    for seed in args.seeds:
        truth, commands, fine = truth_and_commands(problem, seed, args.duration, args.sim_rate)
        states = fine[::int(round(args.sim_rate / rate))]
        for row, (values, linear) in readings(commands, args.sim_rate, rate).items():
            error = window_error(problem, truth, states, model_inputs(values, linear, dt), dt,
                                 args.substeps)
            table.setdefault(row, []).append(error / args.noise)
    print(f'{args.config}: RK4 at {args.sim_rate:g} Hz under held commands, read at '
          f'{rate:g} Hz; joint-velocity RMS error at the truth over {WINDOW_S:g} s windows')
    print(f'{"torques as read":28s}' + ''.join(f'  seed {s:<6d}' for s in args.seeds)
          + '  [noise stds]')
    for row, errors in table.items():
        print(f'{row:28s}' + ''.join(f'  {e:<11.3f}' for e in errors))
    print('RESULT torque_timing ' + ' '.join(
        f'{row.replace(", ", "_").replace(" ", "_")}={max(errors):.3f}'
        for row, errors in table.items()))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
