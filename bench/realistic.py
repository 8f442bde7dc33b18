"""Payload fits on realistic recordings: what each effect real arms have does to the estimate
and to its interval, with the shipped defaults.

Recordings come from `sysid_ros.io.realistic_arm` (Pinocchio, not the estimator's
dynamics): example-robot-data's Panda (7 joints) tracking random joint sines at 1 kHz,
recorded at 100 Hz, holding a payload on link 7 with a truth drawn at random per recording
(mass U(0.5, 3) kg, centre of mass within a 10 x 10 x 13 cm box, per-joint viscous and
Coulomb friction). Settings: `none` (white noise, viscous + Coulomb friction, a point-mass
payload: the fit's model class holds the truth), each effect of `realistic_arm.ALL_ON` alone,
and `all` of them.

The fit is the payload workflow of the docs with the shipped defaults: lm, the equation
error (`estimator.residual: equation_error`), the payload's mass, centre of mass and inertia
about it (`--payload-model point`: without the inertia), each
joint's viscous, Coulomb and load-dependent Coulomb friction (`load_coulomb`), torque offset
and reflected rotor inertia (armature:
a geared arm's is comparable to its distal links' inertia, and a payload fit without it
absorbs it: 42-68 % heavy on one truth), the torque noise estimated from the data
(`data.torque_noise_std` empty), the filter window chosen by the fit. The recordings hand
their efforts, measured at their stamps, over held as a bag read with
`data.torque_samples: instantaneous` does (`realistic_arm.RealisticArm.record`). Scored per
fit:

  * payload error: |mass - truth| / truth [%];
  * coverage: whether each truth lies in the fit's central 90 % interval
    (`FitResult.interval`): the payload's mass, and pooled over the joints' damping and
    Coulomb friction (their no-load values; the offsets have no single truth under drift);
  * off: a truth of those more than 3 of its stds from the estimate; warned: the fit's
    `warnings` were not empty.

Usage: python -m bench.realistic [--quick] [--truths N] [--settings none all ...]
                                 [--duration S] [--payload-model rigid|point] [--out DIR]
Ends with `RESULT realistic payload_err_pct=... payload_cov90=... friction_cov90=...
warned_when_off=K/N` (the first three over the `all` setting: median payload error and the
coverages; the last pooled over every fit of the run).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import numpy as np

from sysid_ros.io import pipeline
from sysid_ros.io.config import from_dict
from sysid_ros.io.realistic_arm import ALL_ON, Effects, NO_EFFECTS, RealisticArm

JOINTS = [f'panda_joint{i}' for i in range(1, 8)]
PAYLOAD_LINK = 'panda_link7'
RATE = 100.0                     # [Hz] of the recordings and the fit
LEVEL = 0.9
OFF_STDS = 3.0
SETTINGS = ('none',) + Effects.names() + ('all',)
# The payload's own inertia about its centre of mass [kg m^2], every entry identified (a user
# does not know the object's axes).
PAYLOAD_INERTIA = {'ixx': {'min': 0.0, 'max': 0.05}, 'iyy': {'min': 0.0, 'max': 0.05},
                   'izz': {'min': 0.0, 'max': 0.05}, 'ixy': {'min': -0.02, 'max': 0.02},
                   'ixz': {'min': -0.02, 'max': 0.02}, 'iyz': {'min': -0.02, 'max': 0.02}}
PAYLOAD_MODELS = ('rigid', 'point')


def fit_config(payload_model: str = 'rigid') -> dict:
    """The payload workflow's configuration (module doc); `payload_model` 'point' leaves the
    payload's own inertia out."""
    friction = {'damping': {'min': 0.0, 'max': 2.0}, 'coulomb': {'min': 0.0, 'max': 3.0},
                'load_coulomb': {'min': 0.0, 'max': 0.5},
                'offset': {'min': -3.0, 'max': 3.0}, 'armature': {'min': 0.0, 'max': 1.0}}
    return {
        'model': {'urdf': 'example-robot-data:panda', 'joints': JOINTS,
                  'actuator': 'coulomb_viscous',
                  'payload': {'link': PAYLOAD_LINK, 'mass': 0.0, 'com': [0.0, 0.0, 0.05]}},
        'parameters': {'payload': {'mass': {'min': 0.0, 'max': 5.0},
                                   'com': {'x': {'min': -0.2, 'max': 0.2},
                                           'y': {'min': -0.2, 'max': 0.2},
                                           'z': {'min': -0.1, 'max': 0.3}},
                                   **({'inertia': PAYLOAD_INERTIA}
                                      if payload_model == 'rigid' else {})},
                       **{joint: friction for joint in JOINTS}},
        'data': {'rate': RATE},
        'estimator': {'method': 'lm', 'residual': 'equation_error'},
    }


def effects_of(setting: str) -> Effects:
    return {'none': NO_EFFECTS, 'all': ALL_ON}.get(setting) or ALL_ON.only(setting)


def truths_of(truth) -> dict[str, float]:
    """{parameter name: true value} of the scored parameters."""
    values = {'payload.mass': truth.payload_mass}
    values.update({f'payload.com.{axis}': float(c) for axis, c in zip('xyz', truth.payload_com)})
    for j, joint in enumerate(JOINTS):
        values[f'{joint}.damping'] = float(truth.damping[j])
        values[f'{joint}.coulomb'] = float(truth.coulomb[j])
    return values


def score(result, truth) -> dict:
    """The scores of one fit (module doc)."""
    names = list(result.names)
    estimate, std = result.estimate, result.std
    interval = result.interval(LEVEL)
    inside, off = {}, []
    for name, value in truths_of(truth).items():
        i = names.index(name)
        inside[name] = bool(interval[0, i] <= value <= interval[1, i])
        if abs(estimate[i] - value) > OFF_STDS * std[i]:
            off.append(name)
    mass = names.index('payload.mass')
    friction = [v for n, v in inside.items() if n.endswith(('.damping', '.coulomb'))]
    return {'payload_err_pct': 100.0 * abs(estimate[mass] - truth.payload_mass)
            / truth.payload_mass,
            'payload_mass': float(estimate[mass]), 'payload_std': float(std[mass]),
            'payload_true': truth.payload_mass, 'payload_in90': inside['payload.mass'],
            'friction_in90': float(np.mean(friction)), 'off': off,
            'warned': bool(result.warnings), 'warnings': list(result.warnings),
            'converged': bool(result.converged), 'wall_s': result.wall_time}


def run(settings, truths: int, duration: float, payload_model: str = 'rigid',
        log=print) -> dict[str, list[dict]]:
    """Fit `truths` recordings per setting; returns the scores per setting."""
    arm = RealisticArm('example-robot-data:panda', JOINTS, PAYLOAD_LINK)
    problem = pipeline.build_problem(from_dict(fit_config(payload_model)))
    scores: dict[str, list[dict]] = {s: [] for s in settings}
    for k in range(truths):
        truth = arm.draw_truth(np.random.default_rng([k, 11]))
        for setting in settings:
            start = time.perf_counter()
            traj = arm.record(truth, effects_of(setting), duration, RATE, seed=k)
            recorded = time.perf_counter() - start
            result = pipeline.fit(problem, [traj])
            s = score(result, truth)
            s['record_s'] = recorded
            scores[setting].append(s)
            log(f'truth {k:2d} {setting:14s} mass {s["payload_mass"]:.3f} +- '
                f'{s["payload_std"]:.3f} (truth {truth.payload_mass:.3f}, '
                f'{s["payload_err_pct"]:5.1f} %) friction in 90 %: '
                f'{100 * s["friction_in90"]:3.0f} % off: {len(s["off"])} warned: '
                f'{int(s["warned"])} fit {s["wall_s"]:.1f} s')
    return scores


def summary(scores: dict[str, list[dict]]) -> list[tuple]:
    """Rows (setting, median payload error %, payload cov90, friction cov90, off, warned)."""
    rows = []
    for setting, fits in scores.items():
        off = [f for f in fits if f['off']]
        rows.append((setting, float(np.median([f['payload_err_pct'] for f in fits])),
                     float(np.mean([f['payload_in90'] for f in fits])),
                     float(np.mean([f['friction_in90'] for f in fits])),
                     len(off), sum(f['warned'] for f in off), len(fits)))
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--quick', action='store_true',
                        help='6 truths, settings none and all, 15 s recordings')
    parser.add_argument('--truths', type=int, default=None)
    parser.add_argument('--settings', nargs='+', choices=SETTINGS, default=None)
    parser.add_argument('--duration', type=float, default=None, help='[s] per recording')
    parser.add_argument('--payload-model', choices=PAYLOAD_MODELS, default='rigid',
                        help="the fit's payload: a rigid body (its inertia identified, the "
                             'default) or a point mass')
    parser.add_argument('--out', default=os.path.join('out', 'bench_realistic'))
    args = parser.parse_args(argv)
    jax.config.update('jax_enable_x64', True)
    truths = args.truths or (6 if args.quick else 20)
    settings = args.settings or (('none', 'all') if args.quick else SETTINGS)
    duration = args.duration or (15.0 if args.quick else 30.0)
    print(f'{truths} truths x settings {", ".join(settings)}, {duration:g} s at {RATE:g} Hz, '
          f'a {args.payload_model} payload')
    scores = run(settings, truths, duration, args.payload_model)
    rows = summary(scores)
    print(f'\n{"setting":14s} {"payload err %":>13s} {"payload cov90":>13s} '
          f'{"friction cov90":>14s} {"off>3std":>8s} {"warned":>6s}')
    for setting, err, cov, fcov, off, warned, n in rows:
        print(f'{setting:14s} {err:13.2f} {cov:13.2f} {fcov:14.2f} {off:5d}/{n:<2d} '
              f'{warned:6d}')
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, 'scores.json'), 'w', encoding='utf-8') as f:
        json.dump(scores, f, indent=1)
    headline = next((r for r in rows if r[0] == 'all'), rows[-1])
    off = sum(r[4] for r in rows)
    warned = sum(r[5] for r in rows)
    print(f'RESULT realistic payload_err_pct={headline[1]:.2f} payload_cov90={headline[2]:.2f} '
          f'friction_cov90={headline[3]:.2f} warned_when_off={warned}/{off}')


if __name__ == '__main__':
    main()
