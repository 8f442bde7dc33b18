"""URDF loading: continuous joints, fixed-joint merging, locking, and clear errors."""

import numpy as np
import pytest

from sysid_ros.io import model_io, verify

LINK = ('<link name="{n}"><inertial><origin xyz="0.1 0.02 -0.05" rpy="0.1 0.2 0.3"/>'
        '<mass value="{m}"/><inertia ixx="0.02" ixy="0.001" ixz="0.0" iyy="0.03" iyz="0.002"'
        ' izz="0.025"/></inertial></link>')
URDF = ('<robot name="mixed">' + LINK.format(n='base', m=1.0) + LINK.format(n='a', m=1.5)
        + LINK.format(n='b', m=0.7) + LINK.format(n='tool', m=0.3) + LINK.format(n='c', m=0.4)
        + '<joint name="j1" type="continuous"><parent link="base"/><child link="a"/>'
        '<origin xyz="0 0 0.3" rpy="0 0 0.4"/><axis xyz="0 0 1"/></joint>'
        '<joint name="j2" type="revolute"><parent link="a"/><child link="b"/>'
        '<origin xyz="0.2 0 0.1" rpy="0.3 -0.2 0.1"/><axis xyz="0 0.6 0.8"/>'
        '<limit lower="-2" upper="2" effort="10" velocity="3"/>'
        '<dynamics damping="0.1" friction="0.2"/></joint>'
        '<joint name="fixed_tool" type="fixed"><parent link="b"/><child link="tool"/>'
        '<origin xyz="0 0 0.15"/></joint>'
        '<joint name="j3" type="prismatic"><parent link="a"/><child link="c"/>'
        '<origin xyz="0 0.1 0"/><axis xyz="1 0 0"/>'
        '<limit lower="-0.5" upper="0.5" effort="10" velocity="3"/></joint></robot>')


def test_string_urdf_with_continuous_prismatic_and_fixed_joints(tmp_path):
    path = tmp_path / 'mixed.urdf'
    path.write_text(URDF)
    for source in (URDF, str(path)):
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


def test_locking_joints():
    model, _ = model_io.load_urdf(URDF, keep_joints=['j1', 'j2'])
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


def test_unknown_joint_and_unsupported_type():
    with pytest.raises(model_io.ModelError, match="no joint named 'elbow'"):
        model_io.load_urdf(URDF, keep_joints=['j1', 'elbow'])
    floating = URDF.replace('type="continuous"', 'type="floating"')
    with pytest.raises(model_io.ModelError, match="joint 'j1': unsupported joint type"):
        model_io.load_urdf(floating)
