"""A payload with its own inertia, identified from a recording of a robot that holds it."""

import numpy as np

from sysid_ros.io import pipeline
from sysid_ros.io.config import from_dict

# A 1.2 kg bar held 0.15 m below link2's joint: its inertia about the swing axis (y) is of the
# size of m |c|^2, so a point mass cannot stand in for it.
TRUTH = {'payload.mass': 1.2, 'payload.com.x': 0.05, 'payload.com.z': -0.15,
         'payload.inertia.iyy': 0.03}


def _problem(with_inertia: bool):
    payload = {'mass': {'min': 0.0, 'max': 3.0},
               'com': {'x': {'min': -0.2, 'max': 0.2}, 'z': {'min': -0.3, 'max': 0.1}}}
    if with_inertia:
        payload['inertia'] = {'iyy': {'min': 0.0, 'max': 0.2}}
    return pipeline.build_problem(from_dict({
        'model': {'builder': 'double_pendulum', 'payload': {'link': 'link2'}},
        'parameters': {'payload': payload},
        'data': {'rate': 100.0},
        'estimator': {'residual': 'equation_error'}}))


def test_a_payloads_inertia_is_identified_where_a_point_mass_is_biased():
    rigid = _problem(with_inertia=True)
    truth = np.array([TRUTH[n] for n in rigid.names])
    traj = pipeline.simulate(rigid, rigid.spec.to_params(truth, rigid.base_params),
                             duration=10.0, noise=1e-4, seed=3, torque_scale=2.0)
    fitted = pipeline.fit(rigid, [traj])
    point = pipeline.fit(_problem(with_inertia=False), [traj])
    misses = np.abs(fitted.estimate - truth) / fitted.std
    point_error = abs(point.estimate[0] - TRUTH['payload.mass']) / TRUTH['payload.mass']
    print(f'rigid: {dict(zip(rigid.names, np.round(fitted.estimate, 5)))}, misses {misses} '
          f'stds; point mass: mass {point.estimate[0]:.4f} kg ({point_error:.1%}), warnings '
          f'{point.warnings}')
    assert fitted.converged, fitted.warnings
    np.testing.assert_allclose(fitted.estimate, truth, rtol=0.02)
    assert np.all(misses < 3.0)
    # The point mass puts the bar's inertia into its mass and position, misses, and says so.
    assert point_error > 0.05
    assert any('identify parameters.payload.inertia' in w for w in point.warnings), \
        point.warnings
    assert not any('correlated' in w for w in fitted.warnings), fitted.warnings
