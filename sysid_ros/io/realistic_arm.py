"""Recordings of an arm with the effects real arms have, simulated by Pinocchio (an engine the
estimator does not use) for tests and benches of fits on real-looking data.

    arm = RealisticArm('example-robot-data:panda', joints, payload_link='panda_link7')
    truth = arm.draw_truth(np.random.default_rng(0))
    traj = arm.record(truth, ALL_ON, duration=20.0, rate=100.0, seed=0)

The arm follows smooth random joint sines inside its limits (`simulation.joint_sines`),
tracked at `CONTROL_RATE` by a computed-torque law on the nominal rigid model (it knows
neither the payload nor the effects), each command held for one control period; the truth is
integrated at `sim_rate` by linearly implicit Euler in the friction and the joint springs
(stiff smoothed Coulomb friction and stiff joints stay stable). What a fit does not model, each
switched on by a nonzero field of `Effects`:

  * load_friction: harmonic-drive friction whose Coulomb torque grows with the joint's load,
    (coulomb + load_friction |tau|) tanh(qd / eps) + damping qd, tau the motor torque;
  * gain_error: the efforts are the torques through per-joint gains known to this relative
    std (a current-to-torque gain off by a few percent);
  * rotor_inertia: reflected rotor inertia [kg m^2] on each joint, times U(0.5, 1.5);
  * stiffness: elastic joints [N m / rad] (damping ratio 0.1 on the motor inertia, which
    is at least 0.2 kg m^2: lighter motors make the tracking law unstable), with the
    encoders and the efforts on the motor side;
  * drift: a torque offset per joint drifting linearly over the recording up to this many
    N m (temperature), random sign;
  * jitter: each recorded stamp off by N(0, jitter^2) [s] (host stamps);
  * coloured_noise: AR(1) torque noise of this std [N m] with correlation time
    `NOISE_CORRELATION_S`;
  * payload_size: the payload is a solid cube of this side [m] (its own inertia) rather than
    a point mass.

Always present: white noise on positions (`POSITION_NOISE`), velocities (`VELOCITY_NOISE`)
and torques (`TORQUE_NOISE`), viscous and Coulomb friction, the payload's mass and centre of
mass. A truth (`ArmTruth`) is drawn at random by `draw_truth`.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
import pinocchio as pin

from sysid_ros.io import model_io, simulation
from sysid_ros.io.trajectory import hold_torques, Trajectory

__all__ = ['CONTROL_RATE', 'POSITION_NOISE', 'VELOCITY_NOISE', 'TORQUE_NOISE',
           'NOISE_CORRELATION_S', 'FRICTION_EPS', 'Effects', 'NO_EFFECTS', 'ALL_ON',
           'ArmTruth', 'RealisticArm']

CONTROL_RATE = 1000.0           # [Hz] the tracking controller's rate (command held between)
POSITION_NOISE = 1e-4           # [rad] encoder noise std
VELOCITY_NOISE = 2e-3           # [rad/s] velocity noise std
TORQUE_NOISE = 0.05             # [N m] white torque-measurement noise std
NOISE_CORRELATION_S = 0.1       # [s] correlation time of the coloured torque noise
FRICTION_EPS = 1e-2             # [rad/s] velocity scale of the Coulomb friction's tanh
_SPRING_DAMPING_RATIO = 0.1     # [-] of the joint springs, on the motor inertia
_MIN_ROTOR_INERTIA = 0.2        # [kg m^2] motor inertia of an elastic joint without one set
_TRACKING_HZ = 5.0              # [Hz] natural frequency of the tracking law


@dataclasses.dataclass(frozen=True)
class Effects:
    """Magnitudes of the effects the fitted rigid model lacks; 0 switches one off (module
    doc)."""

    load_friction: float = 0.0      # [-] Coulomb torque per N m of load torque
    gain_error: float = 0.0         # [-] relative std of each joint's torque gain
    rotor_inertia: float = 0.0      # [kg m^2] reflected rotor inertia per joint
    stiffness: float = 0.0          # [N m / rad] joint stiffness (0: rigid)
    drift: float = 0.0              # [N m] largest torque-offset drift over the recording
    jitter: float = 0.0             # [s] std of the stamp error
    coloured_noise: float = 0.0     # [N m] std of the AR(1) torque noise
    payload_size: float = 0.0       # [m] side of the payload cube (0: a point mass)

    @staticmethod
    def names() -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(Effects))

    def only(self, name: str) -> 'Effects':
        """These magnitudes with every effect but `name` off."""
        return Effects(**{name: getattr(self, name)})


NO_EFFECTS = Effects()
# Magnitudes of a 7-DoF collaborative arm (harmonic drives, joint torque or current sensing):
# friction growing ~5 % of the load, gains to 3 %, reflected rotor inertias of 0.1-0.3 kg m^2,
# joint stiffness 2e4 N m/rad, 0.2 N m of drift, 1 ms stamp jitter, 0.1 N m of
# slowly correlated torque noise, a 10 cm payload cube.
ALL_ON = Effects(load_friction=0.05, gain_error=0.03, rotor_inertia=0.2, stiffness=2e4,
                 drift=0.2, jitter=1e-3, coloured_noise=0.1, payload_size=0.1)


@dataclasses.dataclass(frozen=True)
class ArmTruth:
    """The hidden truth of one recording.

    Attributes:
      payload_mass: [kg].
      payload_com: (3,) payload centre of mass in the payload link's frame [m].
      damping: (nv,) viscous friction [N m s / rad].
      coulomb: (nv,) Coulomb friction at no load [N m].
    """

    payload_mass: float
    payload_com: np.ndarray
    damping: np.ndarray
    coulomb: np.ndarray


class RealisticArm:
    """A URDF arm with a payload, recorded with `Effects` (module doc).

    Args:
      urdf: what `model_io.load_pinocchio` reads (a file, URDF XML, `example-robot-data:X`).
      joints: (nv,) the joints that move, in state order; the others are locked.
      payload_link: the link (or fixed frame) that holds the payload.
      sim_rate: integration rate [Hz], a whole multiple of CONTROL_RATE.
    """

    def __init__(self, urdf: str, joints: Sequence[str], payload_link: str,
                 sim_rate: float = 4000.0):
        self.model = model_io.load_pinocchio(urdf, keep_joints=list(joints))
        self.joints = tuple(joints)
        if [self.model.names[i] for i in range(1, self.model.njoints)] != list(joints):
            raise ValueError(f'joints: expected the movable joints in URDF order, '
                             f'{[self.model.names[i] for i in range(1, self.model.njoints)]}')
        self.nv = self.model.nv
        frame = self.model.frames[self.model.getFrameId(payload_link)]
        self.payload_joint, self.payload_placement = frame.parentJoint, frame.placement
        self.steps = int(round(sim_rate / CONTROL_RATE))
        if self.steps < 1 or abs(self.steps * CONTROL_RATE - sim_rate) > 1e-9 * sim_rate:
            raise ValueError(f'sim_rate: expected a whole multiple of {CONTROL_RATE:g} Hz, '
                             f'got {sim_rate!r}')
        self.dt = 1.0 / sim_rate
        self.q_min = np.asarray(self.model.lowerPositionLimit, float)
        self.q_max = np.asarray(self.model.upperPositionLimit, float)
        self.v_max = np.asarray(self.model.velocityLimit, float)
        self.effort_max = np.asarray(self.model.effortLimit, float)

    def draw_truth(self, rng: np.random.Generator, mass=(0.5, 3.0),
                   com_low=(-0.05, -0.05, 0.02), com_high=(0.05, 0.05, 0.15),
                   damping=(0.05, 0.6), coulomb=(0.1, 1.0)) -> ArmTruth:
        """A truth with every value uniform in its range (payload mass [kg], its centre of
        mass [m] in the payload link's frame, per-joint damping and Coulomb friction)."""
        return ArmTruth(payload_mass=float(rng.uniform(*mass)),
                        payload_com=rng.uniform(com_low, com_high),
                        damping=rng.uniform(*damping, self.nv),
                        coulomb=rng.uniform(*coulomb, self.nv))

    def record(self, truth: ArmTruth, effects: Effects, duration: float, rate: float,
               seed: int = 0) -> Trajectory:
        """A recording of `duration` [s] at `rate` [Hz] (a divisor of CONTROL_RATE): stamps
        [s], measured q [rad], qd [rad/s] and efforts as joint torques [N m] (through the
        assumed gains), in the order of `joints`; the same arguments give the same samples.
        The efforts are measured at the stamps and handed over in the `Trajectory`
        convention (tau[k] held from t[k] to t[k+1]) as a bag reader does with
        `data.torque_samples: instantaneous` (`trajectory.hold_torques`): taken as held, an
        effort read at its stamp lags the states by half a sample."""
        rng = np.random.default_rng([seed, 7])
        nv, per_sample = self.nv, int(round(CONTROL_RATE / rate))
        truth_model = self.payload_model(truth, effects.payload_size)
        rotor = (effects.rotor_inertia * rng.uniform(0.5, 1.5, nv) if effects.rotor_inertia
                 else np.zeros(nv))
        elastic = effects.stiffness > 0.0
        motor_inertia = np.maximum(rotor, _MIN_ROTOR_INERTIA) if elastic else rotor
        spring_damping = 2.0 * _SPRING_DAMPING_RATIO * np.sqrt(effects.stiffness
                                                               * motor_inertia)
        num = int(round(duration * rate)) + 1
        controls = (num - 1) * per_sample + 1
        t_control = np.arange(controls) / CONTROL_RATE
        q_ref, qd_ref, qdd_ref = simulation.joint_sines(
            t_control, self.q_min, self.q_max, self.v_max, np.random.default_rng([seed, 1]),
            margin=0.15, speed=0.4)
        nominal = self.model
        data, nominal_data = truth_model.createData(), nominal.createData()
        q_link, qd_link = q_ref[0].copy(), qd_ref[0].copy()
        q_motor, qd_motor = q_link.copy(), qd_link.copy()
        gain = 2.0 * np.pi * _TRACKING_HZ
        samples = np.empty((num, 3, nv))
        for k in range(controls):
            q_meas, qd_meas = (q_motor, qd_motor) if elastic else (q_link, qd_link)
            qdd_cmd = qdd_ref[k] + gain ** 2 * (q_ref[k] - q_meas) + 2.0 * gain * (
                qd_ref[k] - qd_meas)
            tau = np.clip(pin.rnea(nominal, nominal_data, q_meas, qd_meas, qdd_cmd),
                          -self.effort_max, self.effort_max)
            if k % per_sample == 0:
                samples[k // per_sample] = q_meas, qd_meas, tau
            if k == controls - 1:
                break
            coulomb = truth.coulomb + effects.load_friction * np.abs(tau)
            for _ in range(self.steps):
                mass = pin.crba(truth_model, data, q_link)
                mass = np.triu(mass) + np.triu(mass, 1).T
                bias = pin.nonLinearEffects(truth_model, data, q_link, qd_link)
                if elastic:
                    delta_link, delta_motor = self._elastic_step(
                        mass, bias, tau, q_link, qd_link, q_motor, qd_motor, motor_inertia,
                        effects.stiffness, spring_damping, truth.damping, coulomb)
                    qd_motor = qd_motor + delta_motor
                    q_motor = q_motor + self.dt * qd_motor
                else:
                    delta_link = self._rigid_step(mass + np.diag(rotor), bias, tau, qd_link,
                                                  truth.damping, coulomb)
                qd_link = qd_link + delta_link
                q_link = q_link + self.dt * qd_link
        return self._measure(samples, effects, rate, duration, rng)

    def _friction(self, qd, damping, coulomb) -> tuple[np.ndarray, np.ndarray]:
        """Friction torque (nv,) at `qd` and its derivative in qd (nv,)."""
        sign = np.tanh(qd / FRICTION_EPS)
        return (damping * qd + coulomb * sign,
                damping + coulomb * (1.0 - sign ** 2) / FRICTION_EPS)

    def _rigid_step(self, mass, bias, tau, qd, damping, coulomb) -> np.ndarray:
        """The velocity change (nv,) over one step of M qdd = tau - bias - friction(qd), the
        friction linearised about `qd` (linearly implicit Euler)."""
        friction, slope = self._friction(qd, damping, coulomb)
        return np.linalg.solve(mass + self.dt * np.diag(slope), self.dt * (tau - bias - friction))

    def _elastic_step(self, mass, bias, tau, q_link, qd_link, q_motor, qd_motor, inertia,
                      stiffness, spring_damping, damping, coulomb):
        """Link and motor velocity changes (nv,) over one linearly implicit Euler step of
        M qdd_l = s - bias, B qdd_m = tau - s - friction(qd_m), with the spring torque
        s = K (q_m - q_l) + D (qd_m - qd_l) taken at the step's end (positions advance by
        the new velocities), so that stiff springs stay stable."""
        dt, nv = self.dt, self.nv
        friction, slope = self._friction(qd_motor, damping, coulomb)
        spring = (stiffness * (q_motor - q_link + dt * (qd_motor - qd_link))
                  + spring_damping * (qd_motor - qd_link))
        coupling = np.diag(dt * (stiffness * dt + spring_damping))
        matrix = np.block([[mass + coupling, -coupling],
                           [-coupling, np.diag(inertia + dt * slope) + coupling]])
        rhs = dt * np.concatenate([spring - bias, tau - spring - friction])
        delta = np.linalg.solve(matrix, rhs)
        return delta[:nv], delta[nv:]

    def payload_model(self, truth: ArmTruth, size: float) -> pin.Model:
        """A copy of the model whose payload link holds the payload (a cube of side `size`,
        or a point mass)."""
        model = self.model.copy()
        mass = truth.payload_mass
        cube = mass * size ** 2 / 6.0 * np.eye(3)
        local = pin.Inertia(mass, np.asarray(truth.payload_com, float), cube)
        model.inertias[self.payload_joint] = (model.inertias[self.payload_joint]
                                              + self.payload_placement.act(local))
        return model

    def _measure(self, samples: np.ndarray, effects: Effects, rate: float, duration: float,
                 rng: np.random.Generator) -> Trajectory:
        """The recorded trajectory of (T, 3, nv) true [q, qd, tau] at the sample times, its
        efforts held (`record`)."""
        num, nv = samples.shape[0], self.nv
        t = np.arange(num) / rate
        q = samples[:, 0] + rng.normal(0.0, POSITION_NOISE, (num, nv))
        qd = samples[:, 1] + rng.normal(0.0, VELOCITY_NOISE, (num, nv))
        gains = 1.0 + effects.gain_error * rng.standard_normal(nv)
        tau = samples[:, 2] * gains + rng.normal(0.0, TORQUE_NOISE, (num, nv))
        if effects.drift:
            tau += np.outer(t / duration, effects.drift * rng.uniform(-1.0, 1.0, nv))
        if effects.coloured_noise:
            tau += _ar1(rng, num, nv, effects.coloured_noise,
                        np.exp(-1.0 / (rate * NOISE_CORRELATION_S)))
        stamps = t
        if effects.jitter:
            stamps = t + rng.normal(0.0, effects.jitter, num)
            stamps = np.maximum.accumulate(stamps) + np.arange(num) * 1e-9   # increasing
        return hold_torques(Trajectory(t=stamps, q=q, qd=qd, tau=tau, joint_names=self.joints,
                                       source='realistic arm'), 'instantaneous')


def _ar1(rng: np.random.Generator, num: int, nv: int, std: float, rho: float) -> np.ndarray:
    """(num, nv) stationary AR(1) noise of std `std` and lag-one correlation `rho`."""
    noise = np.empty((num, nv))
    noise[0] = rng.normal(0.0, std, nv)
    innovation = std * np.sqrt(1.0 - rho ** 2)
    for k in range(1, num):
        noise[k] = rho * noise[k - 1] + rng.normal(0.0, innovation, nv)
    return noise
