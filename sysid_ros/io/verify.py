"""Check the JAX kinematics and dynamics of a model against Pinocchio at random states."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin

from sysid_ros.core.dynamics import kinematics
from sysid_ros.core.dynamics import rigid_body
from sysid_ros.core.model.types import Params, RobotModel
from sysid_ros.io import model_io

TOLERANCE = 1e-9
QUANTITIES = ('fk', 'rnea', 'aba', 'crba', 'regressor')


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """Largest absolute error of each quantity over all samples (float64)."""

    model_name: str
    num_samples: int
    max_abs_error: dict

    @property
    def passed(self) -> bool:
        return all(e <= TOLERANCE for e in self.max_abs_error.values())

    def table(self) -> str:
        lines = [f'{self.model_name}: {self.num_samples} random states, tolerance {TOLERANCE:g}',
                 f'{"quantity":<10} {"max abs error":>14}  ok']
        for name, err in self.max_abs_error.items():
            lines.append(f'{name:<10} {err:14.3e}  {"yes" if err <= TOLERANCE else "NO"}')
        return '\n'.join(lines)


def _jax_functions(model: RobotModel):
    """Batched, jitted JAX quantities over states (S, nv) for one parameter set."""
    def one(params, q, qd, qdd, tau):
        R, p = kinematics.forward_kinematics(model, params, q)
        return {'fk_R': R, 'fk_p': p, 'rnea': rigid_body.rnea(model, params, q, qd, qdd),
                'aba': rigid_body.aba(model, params, q, qd, tau),
                'crba': rigid_body.crba(model, params, q),
                'regressor': rigid_body.regressor(model, params, q, qd, qdd)}
    return jax.jit(jax.vmap(one, in_axes=(None, 0, 0, 0, 0)))


def _pinocchio_reference(pmodel: pin.Model, model: RobotModel, q, qd, qdd, tau):
    pdata = pmodel.createData()
    ref = {'fk_R': [], 'fk_p': [], 'rnea': [], 'aba': [], 'crba': [], 'regressor': []}
    for s in range(q.shape[0]):
        qp = model_io.pinocchio_configuration(model, q[s])
        pin.forwardKinematics(pmodel, pdata, qp)
        ref['fk_R'].append([pdata.oMi[j].rotation.copy() for j in range(1, pmodel.njoints)])
        ref['fk_p'].append([pdata.oMi[j].translation.copy() for j in range(1, pmodel.njoints)])
        ref['rnea'].append(pin.rnea(pmodel, pdata, qp, qd[s], qdd[s]).copy())
        ref['aba'].append(pin.aba(pmodel, pdata, qp, qd[s], tau[s]).copy())
        mass = pin.crba(pmodel, pdata, qp)
        ref['crba'].append(np.triu(mass) + np.triu(mass, 1).T)
        ref['regressor'].append(
            pin.computeJointTorqueRegressor(pmodel, pdata, qp, qd[s], qdd[s]).copy())
    return {k: np.asarray(v) for k, v in ref.items()}


def random_states(model: RobotModel, num_samples: int, seed: int = 0):
    """Joint positions within limits (or [-pi, pi]) and N(0, 1) velocities, accelerations
    and torques: four (num_samples, nv) arrays."""
    rng = np.random.default_rng(seed)
    lo = np.where(np.isfinite(model.q_min), model.q_min, -np.pi)
    hi = np.where(np.isfinite(model.q_max), model.q_max, np.pi)
    q = rng.uniform(lo, hi, size=(num_samples, model.nv))
    qd, qdd, tau = (rng.normal(size=(num_samples, model.nv)) for _ in range(3))
    return q, qd, qdd, tau


def verify(model: RobotModel, params: Params, pmodel: pin.Model | None = None,
           num_samples: int = 20, seed: int = 0) -> VerifyReport:
    """Compare FK, RNEA, ABA, CRBA and the regressor with Pinocchio at random states.

    Args:
      model: the JAX model.
      params: its parameters.
      pmodel: the Pinocchio reference, e.g. parsed straight from the URDF; built from
        `(model, params)` when None (for builders).
      num_samples: number of random states compared.
      seed: seed of the random states.
    """
    if pmodel is None:
        pmodel = model_io.to_pinocchio(model, params)
    states = random_states(model, num_samples, seed)
    ours = jax.device_get(_jax_functions(model)(params, *(jnp.asarray(s) for s in states)))
    ref = _pinocchio_reference(pmodel, model, *states)
    errors = {k: float(np.max(np.abs(np.asarray(ours[k]) - ref[k]))) for k in ref}
    report = {'fk': max(errors.pop('fk_R'), errors.pop('fk_p')), **errors}
    return VerifyReport(model.name, num_samples, {k: report[k] for k in QUANTITIES})
