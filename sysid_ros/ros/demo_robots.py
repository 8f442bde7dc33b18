"""The simulated robots of the live demo (`sysid demo`) and `bench/live.py`: which packaged
configuration each runs and the `sim_robot` parameters that set its hidden truth.

The arm: example-robot-data's Panda of `config/panda_live.yaml`, joint-space sines inside the
limits, efforts published at 1 kHz, hidden viscous and Coulomb friction on every joint (the
nominal one plus 0.3 N m s/rad and 0.5 N m times U(0.5, 1.5), see `io.simulated_robot`) and a
rigid 1 kg payload on link 7 picked up at `payload_time`. It is integrated at 4 kHz, because
its joint 7 under smoothed Coulomb friction is stiff (docs/design/ros.md).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ['DemoRobot', 'ROBOTS', 'PAYLOAD_MASS', 'PAYLOAD_COM', 'PAYLOAD_INERTIA',
           'arm_sim_args']

# The arm's hidden payload: mass [kg], centre of mass in the link-7 frame [m], inertia about
# it (ixx, ixy, ixz, iyy, iyz, izz) [kg m^2].
PAYLOAD_MASS = 1.0
PAYLOAD_COM = (0.02, -0.01, 0.15)
PAYLOAD_INERTIA = (0.002, 0.0, 0.0, 0.002, 0.0, 0.002)


def arm_sim_args(payload_time: float) -> tuple[str, ...]:
    """`sim_robot` parameters (name:=value) of the arm; the payload is picked up
    `payload_time` seconds after start [s, simulated] (0: held from the start)."""
    return ('publish_rate:=1000.0', 'sim_rate:=4000.0', 'excitation:=joint_sines',
            'true_damping:=0.3', 'true_coulomb:=0.5', 'effort_noise:=0.05', 'noise:=0.001',
            f'payload_mass:={PAYLOAD_MASS}', f'payload_time:={payload_time}',
            f'payload_position:={list(PAYLOAD_COM)}', f'payload_inertia:={list(PAYLOAD_INERTIA)}')


class DemoRobot(NamedTuple):
    """One robot of the live demo.

    Attributes:
      config: packaged problem configuration of both nodes (a file name in `config/`).
      sim_args: `sim_robot` parameters (name:=value) beyond the configuration.
      duration: seconds of estimates the demo collects by default [s, wall].
    """

    config: str
    sim_args: tuple[str, ...]
    duration: float


# Picked up 20 s into the run: first the friction with nothing held, then the payload.
ROBOTS = {
    'panda': DemoRobot('panda_live.yaml', arm_sim_args(payload_time=20.0), 50.0),
    'double_pendulum': DemoRobot('double_pendulum_live.yaml', (), 60.0),
}
