"""Identified parameters written into URDFs load back unchanged through Pinocchio (and the
joint values URDF has no element for, through their `sysid:dynamics` element)."""

import dataclasses

import jax.numpy as jnp
import numpy as np

from sysid_ros.core.model import builders
from sysid_ros.io import model_io, urdf_export


def _perturbed(params, seed):
    rng = np.random.default_rng(seed)
    nb = params.inertial.shape[0]
    # A consistent change: scale each body's inertial vector (mass, first and second moments).
    scale = rng.uniform(0.8, 1.2, size=(nb, 1))
    placement = params.placement + jnp.asarray(rng.normal(scale=0.01, size=(nb, 6)))
    return dataclasses.replace(params, inertial=params.inertial * scale, placement=placement,
                               damping=jnp.asarray(rng.uniform(0.0, 0.5, nb)),
                               coulomb=jnp.asarray(rng.uniform(0.0, 0.5, nb)),
                               armature=jnp.asarray(rng.uniform(0.0, 0.3, nb)),
                               offset=jnp.asarray(rng.normal(scale=0.2, size=nb)),
                               gain=jnp.asarray(rng.uniform(0.95, 1.05, nb)),
                               stribeck=jnp.asarray(rng.uniform(0.0, 0.2, (nb, 2))),
                               load_coulomb=jnp.asarray(rng.uniform(0.0, 0.1, nb)))


def _assert_same(params, reloaded):
    for name in ('inertial', 'placement', 'damping', 'coulomb', 'armature', 'offset', 'gain',
                 'stribeck', 'load_coulomb'):
        np.testing.assert_allclose(getattr(reloaded, name), getattr(params, name), atol=1e-9,
                                   err_msg=name)


def test_update_urdf_round_trip_with_merged_fixed_link(mixed_urdf):
    model, nominal = model_io.load_urdf(mixed_urdf)
    identified = _perturbed(nominal, 0)
    written = urdf_export.update_urdf(mixed_urdf, model, nominal, identified)
    model2, reloaded = model_io.load_urdf(written)
    assert model2.joint_names == model.joint_names
    _assert_same(identified, reloaded)


def test_update_panda_with_locked_fingers():
    path, _ = model_io.example_robot_urdf('panda')
    xml = open(path).read()
    model, nominal = model_io.load_urdf(xml, locked_joints=('panda_finger_joint1',
                                                            'panda_finger_joint2'))
    identified = _perturbed(nominal, 1)
    written = urdf_export.update_urdf(xml, model, nominal, identified)
    _, reloaded = model_io.load_urdf(written, locked_joints=('panda_finger_joint1',
                                                             'panda_finger_joint2'))
    _assert_same(identified, reloaded)


def test_builder_model_to_urdf():
    model, params = builders.furuta_pendulum(damping=0.05)
    model2, reloaded = model_io.load_urdf(urdf_export.model_to_urdf(model, params))
    assert model2.axis == model.axis and model2.parents == model.parents
    _assert_same(params, reloaded)


def test_joint_dynamics_are_written_only_where_they_differ_from_their_defaults():
    model, params = builders.furuta_pendulum(damping=0.05)
    plain = urdf_export.model_to_urdf(model, params)
    assert urdf_export.JOINT_DYNAMICS_NAMESPACE not in plain
    params = dataclasses.replace(params, armature=params.armature.at[1].set(0.02))
    written = urdf_export.model_to_urdf(model, params)
    assert written.count('<sysid:dynamics ') == 1
    assert model_io.joint_dynamics(written) == {model.joint_names[1]: {
        'armature': 0.02, 'offset': 0.0, 'gain': 1.0, 'stribeck_torque': 0.0,
        'stribeck_velocity': 0.0, 'load_coulomb': 0.0}}
