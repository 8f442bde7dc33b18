"""URDF loading: continuous joints, fixed-joint merging, locking, and clear errors."""

import numpy as np
import pytest

from sysid_ros.io import model_io, verify


def test_string_urdf_with_continuous_prismatic_and_fixed_joints(tmp_path, mixed_urdf):
    path = tmp_path / 'mixed.urdf'
    path.write_text(mixed_urdf)
    for source in (mixed_urdf, str(path)):
        pmodel = model_io.load_pinocchio(source)
        model, params = model_io.from_pinocchio(pmodel)
        assert model.joint_names == ('j1', 'j2', 'j3')
        assert model.continuous == (True, False, False)
        assert model.joint_types == ('revolute', 'revolute', 'prismatic')
        assert model.parents == (-1, 0, 0)
        # The fixed tool is merged into link b: mass 0.7 + 0.3.
        np.testing.assert_allclose(params.inertial[1, 0], 1.0)
        np.testing.assert_allclose(params.damping, [0.0, 0.1, 0.0])
        np.testing.assert_allclose(params.coulomb, [0.0, 0.2, 0.0])
        report = verify.verify(model, params, pmodel, num_samples=5)
        assert report.passed, report.table()


def test_locking_joints(mixed_urdf):
    model, _ = model_io.load_urdf(mixed_urdf, keep_joints=['j1', 'j2'])
    assert model.joint_names == ('j1', 'j2')
    panda, _ = model_io.load_urdf('example-robot-data:panda')
    assert panda.nv == 7 and panda.link_names[-1] == 'panda_link7'


@pytest.mark.parametrize('source, message', [
    ('/does/not/exist.urdf', 'URDF file not found'),
    ('<robot name="x"><link', 'cannot parse URDF'),
    ('example-robot-data:nothing', 'unknown example robot'),
])
def test_bad_urdf_names_the_source(source, message):
    with pytest.raises(model_io.ModelError, match=message):
        model_io.load_urdf(source)


def test_unknown_joint_and_unsupported_type(mixed_urdf):
    with pytest.raises(model_io.ModelError, match="no joint named 'elbow'"):
        model_io.load_urdf(mixed_urdf, keep_joints=['j1', 'elbow'])
    floating = mixed_urdf.replace('type="continuous"', 'type="floating"')
    with pytest.raises(model_io.ModelError, match="joint 'j1': unsupported joint type"):
        model_io.load_urdf(floating)
