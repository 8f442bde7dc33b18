"""ParameterSpec: names, bounds, Params round trips, unconstrained coordinates, consistency."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
from jax.test_util import check_grads
import numpy as np
import pytest

from sysid_ros.core.model import inertia
from sysid_ros.core.model import parameters
from sysid_ros.core.model.parameters import make_parameter_spec
from sysid_ros.core.model.types import Params, RobotModel

jax.config.update('jax_enable_x64', True)  # also set by test/conftest.py

MODEL = RobotModel(name='dp', link_names=('link1', 'link2'), joint_names=('joint1', 'joint2'),
                   parents=(-1, 0), joint_types=('revolute', 'revolute'),
                   continuous=(False, False), axis=((0.0, 0.0, 1.0), (0.0, 0.0, 1.0)))


def _base() -> Params:
    """Two links with off-diagonal inertia, friction, offsets and a non-trivial second
    placement."""
    rot = inertia.rpy_to_matrix(jnp.array([0.1, -0.2, 0.3]))
    inertial = jnp.stack([
        inertia.inertial_from_physical(1.5, jnp.array([0.25, 0.01, -0.02]),
                                       rot @ jnp.diag(jnp.array([0.02, 0.03, 0.04])) @ rot.T),
        inertia.inertial_from_physical(0.8, jnp.array([0.2, 0.0, 0.03]),
                                       jnp.diag(jnp.array([0.01, 0.015, 0.012]))),
    ])
    return Params(inertial=inertial,
                  placement=jnp.array([[0.0] * 6, [0.5, 0.0, 0.1, 0.0, 0.05, 0.0]]),
                  armature=jnp.array([0.01, 0.02]), damping=jnp.array([0.1, 0.2]),
                  coulomb=jnp.array([0.05, 0.03]),
                  stribeck=jnp.array([[0.02, 0.1], [0.01, 0.2]]),
                  offset=jnp.array([0.4, -0.3]), gain=jnp.array([1.05, 0.97]),
                  load_coulomb=jnp.array([0.02, 0.04]))


BASE = _base()

ALL_LINK2 = {f'link2.{a}': (-1.0, 1.0) for a in parameters.LINK_ATTRIBUTES}
ALL_LINK2.update({'link2.mass': (0.1, 2.0), 'link2.inertia.ixx': (0.0, 0.1),
                  'link2.inertia.iyy': (0.0, 0.1), 'link2.inertia.izz': (0.0, 0.1)})
ENTRIES = {
    'link1.mass': (0.5, 3.0),
    'link1.com.x': (-0.5, 0.5),
    'link1.inertia.izz': (0.0, np.inf),
    **ALL_LINK2,
    'joint1.damping': (0.0, 1.0),
    'joint2.damping': (0.0, np.inf),
    'joint1.coulomb': (0.0, 0.5),
    'joint2.stribeck.torque': (0.0, 0.5),
    'joint2.stribeck.velocity': (0.0, 1.0),
    'joint1.armature': (0.0, 0.1),
    'joint2.offset': (-1.0, 1.0),                                   # signed
    'joint2.origin.x': (-np.inf, np.inf),
    'joint2.origin.z': (-np.inf, 0.5),
    'joint2.origin.pitch': (-np.pi, np.pi),
}
SPEC = make_parameter_spec(MODEL, ENTRIES)


@functools.partial(jax.jit, static_argnums=0)
def _to_params(spec, theta, base):
    return spec.to_params(theta, base)


@functools.partial(jax.jit, static_argnums=0)
def _from_params(spec, params):
    return spec.from_params(params)


@functools.partial(jax.jit, static_argnums=0)
def _to_z(spec, theta):
    return spec.to_unconstrained(theta)


@functools.partial(jax.jit, static_argnums=0)
def _from_z(spec, z):
    return spec.from_unconstrained(z)


@functools.partial(jax.jit, static_argnums=0)
def _consistent(spec, theta, base):
    return jax.vmap(spec.is_consistent, in_axes=(0, None))(theta, base)


def test_all_names_import():
    for name in parameters.__all__:
        assert hasattr(parameters, name), name


def test_spec_is_hashable_and_static():
    again = make_parameter_spec(MODEL, ENTRIES)
    assert again == SPEC and hash(again) == hash(SPEC)
    assert SPEC.num_params == len(ENTRIES)
    assert SPEC.names == tuple(ENTRIES)
    np.testing.assert_array_equal(SPEC.lower, [b[0] for b in ENTRIES.values()])
    np.testing.assert_array_equal(SPEC.upper, [b[1] for b in ENTRIES.values()])
    assert SPEC.diffnea_links == (1,)
    assert SPEC.index('joint1.damping') == list(ENTRIES).index('joint1.damping')


def test_split_name():
    assert parameters.split_name('link2.com.x') == ('link2', 'com.x')
    assert parameters.split_name('arm.v2.inertia.ixy') == ('arm.v2', 'inertia.ixy')
    assert parameters.split_name('j.origin.yaw') == ('j', 'origin.yaw')
    with pytest.raises(ValueError, match='link2.foo'):
        parameters.split_name('link2.foo')


def test_from_params_reads_physical_values():
    theta = dict(zip(SPEC.names, np.asarray(_from_params(SPEC, BASE))))
    assert theta['link1.mass'] == pytest.approx(1.5)
    assert theta['link1.com.x'] == pytest.approx(0.25)
    assert theta['link2.com.z'] == pytest.approx(0.03)
    assert theta['link2.inertia.iyy'] == pytest.approx(0.015)
    assert theta['link2.inertia.ixy'] == pytest.approx(0.0, abs=1e-15)
    assert theta['joint2.stribeck.velocity'] == pytest.approx(0.2)
    assert theta['joint2.offset'] == pytest.approx(-0.3)
    assert theta['joint2.origin.z'] == pytest.approx(0.1)
    assert theta['joint2.origin.pitch'] == pytest.approx(0.05)


def test_to_params_round_trip_and_writes_only_named_fields():
    theta = _from_params(SPEC, BASE)
    np.testing.assert_allclose(_to_params(SPEC, theta, BASE).inertial, BASE.inertial,
                               atol=1e-14)
    new = theta + 0.01
    params = _to_params(SPEC, new, BASE)
    np.testing.assert_allclose(_from_params(SPEC, params), new, atol=1e-13)
    assert params.damping[0] == pytest.approx(0.11) and params.damping[1] == pytest.approx(0.21)
    assert params.coulomb[1] == BASE.coulomb[1]                    # joint2.coulomb not free
    assert params.armature[1] == BASE.armature[1]
    assert params.offset[0] == BASE.offset[0]                      # joint1.offset not free
    assert params.offset[1] == pytest.approx(-0.29)
    np.testing.assert_array_equal(params.placement[0], BASE.placement[0])
    assert params.placement[1, 1] == BASE.placement[1, 1]          # origin.y not free
    assert params.placement[1, 0] == pytest.approx(0.51)


def test_to_params_keeps_the_other_physical_values_of_a_link():
    spec = make_parameter_spec(MODEL, {'link1.mass': (0.0, 10.0), 'link1.com.y': (-1, 1)})
    params = _to_params(spec, jnp.array([3.0, 0.2]), BASE)
    mass, com, inertia_c = inertia.physical_from_inertial(params.inertial[0])
    base_mass, base_com, base_inertia_c = inertia.physical_from_inertial(BASE.inertial[0])
    assert mass == pytest.approx(3.0)
    np.testing.assert_allclose(com, [base_com[0], 0.2, base_com[2]], atol=1e-14)
    np.testing.assert_allclose(inertia_c, base_inertia_c, atol=1e-14)
    np.testing.assert_array_equal(params.inertial[1], BASE.inertial[1])


def test_to_params_vmap_over_particles_and_gradients():
    theta = _from_params(SPEC, BASE)
    thetas = theta + 0.01 * jax.random.normal(jax.random.PRNGKey(0), (5, SPEC.num_params))
    batched = jax.jit(jax.vmap(SPEC.to_params, in_axes=(0, None)))(thetas, BASE)
    assert batched.inertial.shape == (5, 2, 10) and batched.placement.shape == (5, 2, 6)
    np.testing.assert_allclose(batched.inertial[3], _to_params(SPEC, thetas[3], BASE).inertial)

    def loss(th):
        p = SPEC.to_params(th, BASE)
        return (jnp.sum(p.inertial ** 2) + jnp.sum(p.placement ** 2) + jnp.sum(p.stribeck)
                + jnp.sum(p.damping * p.coulomb) + jnp.sum(p.armature)
                + jnp.sum(p.offset ** 2))
    check_grads(jax.jit(loss), (theta,), order=1, modes=('rev',))


def test_unconstrained_round_trip_and_jit_vmap():
    theta = _from_params(SPEC, BASE)
    z = _to_z(SPEC, theta)
    assert np.all(np.isfinite(z))
    np.testing.assert_allclose(_from_z(SPEC, z), theta, atol=1e-12)
    thetas = jnp.stack([theta, theta * 1.01])
    np.testing.assert_allclose(_from_z(SPEC, _to_z(SPEC, thetas)), thetas, atol=1e-12)
    np.testing.assert_allclose(jax.jit(jax.vmap(SPEC.from_unconstrained))(
        _to_z(SPEC, thetas)), thetas, atol=1e-12)


def test_unconstrained_gradients():
    z = jax.random.normal(jax.random.PRNGKey(4), (SPEC.num_params,))
    check_grads(jax.jit(SPEC.from_unconstrained), (z,), order=1, modes=('rev',))


def test_from_unconstrained_respects_bounds():
    z = jnp.concatenate([
        30.0 * jax.random.normal(jax.random.PRNGKey(1), (500, SPEC.num_params)),
        jnp.full((1, SPEC.num_params), 40.0), jnp.full((1, SPEC.num_params), -40.0)])
    theta = np.asarray(_from_z(SPEC, z))
    assert np.all(np.isfinite(theta))
    elementwise = [k for k, a in enumerate(SPEC.attributes)
                   if not (SPEC.bodies[k] == 1 and a.startswith('inertia.'))]
    lo, hi = np.asarray(SPEC.lower)[elementwise], np.asarray(SPEC.upper)[elementwise]
    assert np.all(theta[:, elementwise] >= lo) and np.all(theta[:, elementwise] <= hi)


def test_every_unconstrained_sample_is_consistent():
    spec = make_parameter_spec(MODEL, {
        'link1.mass': (0.0, np.inf),
        **{f'link1.{a}': (-1.0, 1.0) for a in parameters.INERTIA_ATTRIBUTES
           if a not in ('inertia.ixx', 'inertia.iyy', 'inertia.izz')},
        **{f'link1.inertia.{a}': (0.0, 1.0) for a in ('ixx', 'iyy', 'izz')},
        **ALL_LINK2,
        'joint1.damping': (0.0, np.inf), 'joint1.coulomb': (0.0, np.inf),
        'joint2.stribeck.torque': (0.0, 1.0), 'joint2.armature': (0.0, np.inf),
    })
    assert spec.diffnea_links == (0, 1)
    z = 3.0 * jax.random.normal(jax.random.PRNGKey(2), (1000, spec.num_params))
    theta = _from_z(spec, z)
    assert bool(jnp.all(_consistent(spec, theta, BASE)))


def test_inertia_box_without_diffnea_block_can_be_inconsistent():
    # Only three inertia entries free: elementwise bounds, no consistency guarantee.
    spec = make_parameter_spec(MODEL, {'link1.inertia.ixx': (0.0, 1.0),
                                       'link1.inertia.iyy': (0.0, 1.0),
                                       'link1.inertia.izz': (0.0, 1.0)})
    assert spec.diffnea_links == ()
    theta = _from_z(spec, jnp.array([[3.0, -3.0, -3.0], [0.0, 0.0, 0.0]]))
    np.testing.assert_array_equal(_consistent(spec, theta, BASE), [False, True])


def test_to_unconstrained_clips_values_at_or_beyond_bounds():
    spec = make_parameter_spec(MODEL, {'joint1.damping': (0.0, np.inf),
                                       'joint2.damping': (0.0, 1.0),
                                       'joint1.origin.z': (-np.inf, 0.5)})
    z = _to_z(spec, jnp.array([[0.0, 1.0, 0.5], [-1.0, 2.0, 0.7]]))
    assert np.all(np.isfinite(z))
    theta = _from_z(spec, z)
    np.testing.assert_allclose(theta, [[0.0, 1.0, 0.5], [0.0, 1.0, 0.5]], atol=1e-12)


def test_is_consistent_flags_each_violation():
    theta = _from_params(SPEC, BASE)
    ok = [theta,
          theta.at[SPEC.index('link1.mass')].set(-1.0),
          theta.at[SPEC.index('link2.inertia.izz')].set(0.5),           # izz > ixx + iyy
          theta.at[SPEC.index('joint2.damping')].set(-0.1),
          theta.at[SPEC.index('joint2.stribeck.velocity')].set(-0.1),
          theta.at[SPEC.index('joint2.origin.x')].set(jnp.nan)]
    np.testing.assert_array_equal(_consistent(SPEC, jnp.stack(ok), BASE),
                                  [True, False, False, False, False, False])


def test_is_consistent_ignores_bodies_outside_the_spec():
    massless = dataclasses.replace(BASE, inertial=BASE.inertial.at[0].set(0.0))
    spec = make_parameter_spec(MODEL, {'link2.mass': (0.1, 1.0)})
    assert bool(_consistent(spec, jnp.array([[0.5]]), massless)[0])
    assert not np.all(parameters.is_friction_consistent(
        dataclasses.replace(BASE, coulomb=jnp.array([-1.0, 0.0]))))


def test_sample_uniform_within_bounds():
    spec = make_parameter_spec(MODEL, {'link1.mass': (0.5, 3.0), 'joint1.damping': (0.0, 1.0),
                                       'joint2.origin.yaw': (-0.1, 0.1)})
    samples = jax.jit(spec.sample_uniform, static_argnums=1)(jax.random.PRNGKey(3), 200)
    assert samples.shape == (200, 3)
    assert bool(jnp.all(spec.within_bounds(samples)))
    assert float(jnp.std(samples[:, 0])) > 0.5
    with pytest.raises(ValueError, match='joint2.damping'):
        SPEC.sample_uniform(jax.random.PRNGKey(0), 2)


def test_initial_theta_uses_init_then_base_clipped():
    spec = make_parameter_spec(MODEL, {'link1.mass': (0.5, 1.0), 'joint1.damping': (0.0, 1.0),
                                       'link2.mass': (0.1, 2.0)},
                               init={'joint1.damping': 0.3})
    np.testing.assert_allclose(jax.jit(spec.initial_theta)(BASE), [1.0, 0.3, 0.8])


@pytest.mark.parametrize('entries, init, match', [
    ({'link9.mass': (0, 1)}, None, r"link9.mass: unknown link 'link9'.*valid links: link1, "
                                   r'link2'),
    ({'joint9.damping': (0, 1)}, None, r"joint9.damping: unknown joint 'joint9'.*valid "
                                       r'joints: joint1, joint2'),
    ({'link1.joint1.damping': (0, 1)}, None, 'unknown joint'),
    ({'joint1.mass': (0, 1)}, None, r"joint1.mass: unknown link 'joint1'"),
    ({'link1.colour': (0, 1)}, None, r"unknown parameter 'link1.colour'.*mass, com.x"),
    ({'link1.mass': (1.0, 1.0)}, None, r'link1.mass: expected lower < upper'),
    ({'link1.mass': (-1.0, 1.0)}, None, r'link1.mass: mass cannot be negative'),
    ({'joint1.stribeck.velocity': (-1.0, 1.0)}, None, 'joint1.stribeck.velocity'),
    ({'link1.mass': ('a', 1.0)}, None, r'link1.mass: lower bound: expected a number'),
    ({'link1.mass': (0.0,)}, None, r'link1.mass: expected bounds'),
    ({'link1.mass': (0.0, 1.0)}, {'link1.mass': 2.0}, r'link1.mass: initial value 2.0'),
    ({'link1.mass': (0.0, 1.0)}, {'link2.mass': 0.5}, r'link2.mass: initial value given'),
])
def test_make_parameter_spec_errors_name_the_key(entries, init, match):
    with pytest.raises(ValueError, match=match):
        make_parameter_spec(MODEL, entries, init=init)


def test_empty_spec_is_identity():
    spec = make_parameter_spec(MODEL, {})
    assert spec.num_params == 0
    assert spec.to_params(jnp.zeros((0,)), BASE) is BASE
    assert spec.from_params(BASE).shape == (0,)


PAYLOAD = parameters.Payload(
    body=1, rotation=tuple(np.ravel(inertia.rpy_to_matrix(jnp.array([0.0, 0.0, np.pi / 2])))),
    translation=(0.5, 0.0, 0.0), mass=0.4, com=(0.0, 0.0, 0.02))
PAYLOAD_ENTRIES = {'payload.mass': (0.0, 3.0), 'payload.com.x': (-0.1, 0.1),
                   'link2.mass': (0.1, 2.0), 'payload.com.z': (-0.1, 0.1)}


def test_payload_is_a_point_mass_at_its_frame():
    spec = make_parameter_spec(MODEL, PAYLOAD_ENTRIES, payload=PAYLOAD)
    assert spec.bodies == (-1, -1, 1, -1)
    theta = jnp.array([1.2, 0.03, 1.1, -0.05])
    got = _to_params(spec, theta, BASE)
    # link2's mass first (its COM and inertia about the COM kept), then a 1.2 kg point at
    # the payload frame's origin + R (0.03, 0, -0.05) = (0.5, 0.03, -0.05) in link2's frame.
    mass, com, inertia_c = inertia.physical_from_inertial(BASE.inertial[1])
    link2 = inertia.inertial_from_physical(1.1, com, inertia_c)
    point = inertia.inertial_from_physical(1.2, jnp.array([0.5, 0.03, -0.05]), jnp.zeros((3, 3)))
    np.testing.assert_allclose(got.inertial[1], link2 + point, atol=1e-14)
    np.testing.assert_allclose(got.inertial[0], BASE.inertial[0], atol=0)
    # Params hold no payload apart from its body: from_params gives the payload's nominal
    # values, and link2's mass with the payload's in it.
    np.testing.assert_allclose(_from_params(spec, got), [0.4, 0.0, 2.3, 0.02], atol=1e-14)
    assert bool(spec.is_consistent(theta, BASE))
    check_grads(lambda t: spec.to_params(t, BASE).inertial, (theta,), order=1,
                modes=('fwd', 'rev'))


def test_payload_that_is_not_free_keeps_its_nominal_values():
    spec = make_parameter_spec(MODEL, {'link1.mass': (0.5, 3.0)}, payload=PAYLOAD)
    got = _to_params(spec, jnp.array([1.5]), BASE)
    point = inertia.inertial_from_physical(0.4, jnp.array([0.5, 0.0, 0.02]), jnp.zeros((3, 3)))
    np.testing.assert_allclose(got.inertial[1], BASE.inertial[1] + point, atol=1e-14)


RIGID_PAYLOAD = dataclasses.replace(PAYLOAD, inertia=(0.002, 0.0, 0.0, 0.003, 0.0, 0.004))
INERTIA_ENTRIES = {f'payload.{a}': ((0.0, 0.05) if a in parameters.NONNEGATIVE_ATTRIBUTES
                                    else (-0.05, 0.05))
                   for a in parameters.INERTIA_ATTRIBUTES}


def test_payload_is_a_rigid_body_as_pinocchio_adds_one():
    pin = pytest.importorskip('pinocchio')
    spec = make_parameter_spec(MODEL, {**PAYLOAD_ENTRIES, **INERTIA_ENTRIES},
                               payload=RIGID_PAYLOAD)
    rot = np.asarray(inertia.rpy_to_matrix(jnp.array([0.3, -0.1, 0.2])))
    moments = rot @ np.diag([0.004, 0.006, 0.007]) @ rot.T          # about the payload's COM
    theta = jnp.array([1.2, 0.03, 1.1, -0.05, *np.asarray(inertia.inertia_entries(moments))])
    got = _to_params(spec, theta, BASE)
    # Pinocchio: link2 with its new mass, plus the payload's inertia moved from the payload
    # frame (rotated a quarter turn about z, 0.5 m along x) into link2's frame.
    _, com, moments_2 = inertia.physical_from_inertial(BASE.inertial[1])
    link2 = pin.Inertia.FromDynamicParameters(np.asarray(
        inertia.inertial_from_physical(1.1, com, moments_2)))
    payload_frame = pin.SE3(np.reshape(RIGID_PAYLOAD.rotation, (3, 3)),
                            np.asarray(RIGID_PAYLOAD.translation))
    held = payload_frame.act(pin.Inertia(1.2, np.array([0.03, 0.0, -0.05]), moments))
    np.testing.assert_allclose(got.inertial[1], (link2 + held).toDynamicParameters(), atol=1e-12)
    assert bool(spec.is_consistent(theta, BASE))
    check_grads(lambda t: spec.to_params(t, BASE).inertial, (theta,), order=1,
                modes=('fwd', 'rev'))


def test_a_payload_whose_own_inertia_is_not_a_bodys_is_inconsistent():
    # ixx > iyy + izz breaks the triangle inequality; link2 with it added would still pass.
    spec = make_parameter_spec(MODEL, {'payload.mass': (0.0, 3.0), **INERTIA_ENTRIES},
                               payload=RIGID_PAYLOAD)
    bad = jnp.array([1.0, 0.004, 0.0, 0.0, 0.001, 0.0, 0.001])
    assert not bool(spec.is_consistent(bad, BASE))
    assert bool(inertia.is_physically_consistent(_to_params(spec, bad, BASE).inertial[1]))
    assert bool(spec.is_consistent(bad.at[1].set(0.002), BASE))


def test_payload_inertia_stays_elementwise_in_unconstrained_coordinates():
    spec = make_parameter_spec(MODEL, {'payload.mass': (0.0, 3.0), **INERTIA_ENTRIES},
                               payload=RIGID_PAYLOAD)
    theta = jnp.array([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])       # a point mass: zero inertia
    z = spec.to_unconstrained(theta)
    assert np.all(np.isfinite(z))
    np.testing.assert_allclose(spec.from_unconstrained(z), theta, atol=1e-12)
    assert np.all(np.asarray(jax.jacfwd(spec.from_unconstrained)(z)).diagonal() > 0.0)


@pytest.mark.parametrize('entries, payload, match', [
    ({'payload.mass': (0, 1)}, None, r'payload.mass: no payload is configured'),
    ({'payload.damping': (0, 1)}, PAYLOAD, r'payload.damping: a payload has the '
                                           r'attributes mass, com.x.*inertia.izz'),
    ({'payload.mass': (0, 1)}, dataclasses.replace(PAYLOAD, body=5), r'payload: body 5'),
])
def test_payload_errors_name_the_key(entries, payload, match):
    with pytest.raises(ValueError, match=match):
        make_parameter_spec(MODEL, entries, payload=payload)
