"""Shared URDF fixtures for the io tests."""

import pytest

LINK = ('<link name="{n}"><inertial><origin xyz="0.1 0.02 -0.05" rpy="0.1 0.2 0.3"/>'
        '<mass value="{m}"/><inertia ixx="0.02" ixy="0.001" ixz="0.0" iyy="0.03" iyz="0.002"'
        ' izz="0.025"/></inertial></link>')
MIXED_URDF = (
    '<robot name="mixed">' + LINK.format(n='base', m=1.0) + LINK.format(n='a', m=1.5)
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
    '<limit lower="-0.5" upper="0.5" effort="10" velocity="3"/></joint></robot>'
)


@pytest.fixture
def mixed_urdf():
    """A URDF with continuous, revolute (unaligned axis), prismatic and fixed joints."""
    return MIXED_URDF
