"""The projection onto the bounds and the physically consistent set
(`consistency.project_consistent`) on the double pendulum of `point_problems`."""

import jax
import jax.numpy as jnp
import numpy as np
from point_problems import consistent, inertia_block, NOMINAL, SPEC, THETA_TRUE
import pytest

from sysid_ros.core.inference import consistency


def test_project_consistent_handles_bounds_blocks_and_anchor():
    lower, upper = np.asarray(SPEC.lower), np.asarray(SPEC.upper)
    raw = THETA_TRUE.copy()
    raw[SPEC.index('link1.mass')] = 9.0                            # above its bound
    raw[SPEC.index('link2.inertia.iyy')] = 0.2                     # breaks the triangle
    raw[SPEC.index('joint1.damping')] = -0.3                       # below its bound
    project = jax.jit(lambda t, a: consistency.project_consistent(SPEC, NOMINAL, t, a))
    out = np.asarray(project(jnp.asarray(raw), jnp.asarray(THETA_TRUE)))
    assert out[SPEC.index('link1.mass')] == 5.0
    assert out[SPEC.index('joint1.damping')] == 0.0
    assert out[SPEC.index('link2.inertia.iyy')] == pytest.approx(0.2, rel=1e-9)  # kept
    assert consistent(out)
    plain = ~inertia_block()
    assert np.all((out[plain] >= lower[plain]) & (out[plain] <= upper[plain]))


def test_all_names_importable():
    for name in consistency.__all__:
        assert hasattr(consistency, name), name
