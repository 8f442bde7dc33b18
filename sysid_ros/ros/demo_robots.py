"""The simulated robots of the live demo (`sysid demo`) and `bench/live.py`: which packaged
configuration each runs and the `sim_robot` parameters that set its hidden truth.

The arm: example-robot-data's Panda of `config/panda_live.yaml`, joint-space sines inside the
limits, efforts published at 1 kHz, hidden viscous and Coulomb friction on every joint (the
nominal one plus 0.3 N m s/rad and 0.5 N m times U(0.5, 1.5), see `io.simulated_robot`) and a
rigid 1 kg payload on link 7 picked up at `payload_time`. It is integrated at 4 kHz, because
its joint 7 under smoothed Coulomb friction is stiff (docs/design/ros.md).

The stand-in drivers of the payload demo (`ros.payload_demo`, `sysid demo --robot ur|franka`):
`sim_robot` with `driver:=ur` (config/ur5_live.yaml's UR5, currents as efforts at 500 Hz,
integrated at 2 kHz, hidden damping) or `driver:=franka` (config/panda_live.yaml's Panda read as
franka_ros2 publishes it, 1 kHz beside a 30 Hz republish, at 4 kHz, hidden damping and Coulomb
friction), each holding a payload drawn from its ranges.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ['DemoRobot', 'ROBOTS', 'PAYLOAD_MASS', 'PAYLOAD_COM', 'PAYLOAD_INERTIA',
           'arm_sim_args', 'StandIn', 'STAND_INS']

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


class StandIn(NamedTuple):
    """A stand-in robot driver of the payload demo.

    Attributes:
      name: the driver profile (`io.drivers.DRIVERS`), also `sim_robot`'s `driver`.
      config: packaged problem configuration (a file name in `config/`).
      sim_args: `sim_robot` arguments (`-p name:=value` pairs) beyond the configuration.
      payload_com_box: ((lo, hi),) * 3 the payload's centre of mass is drawn from [m], in
        `model.payload.link`.
      mass_range: (lo, hi) the payload's mass is drawn from [kg].
      data_changes: `data` entries that replace the configuration's (None: removed).
      from_description: the estimator's configuration names no model: it takes the URDF from
        the robot's `/robot_description`.
    """

    name: str
    config: str
    sim_args: tuple[str, ...]
    payload_com_box: tuple[tuple[float, float], ...]
    mass_range: tuple[float, float]
    data_changes: dict = {}
    from_description: bool = False


STAND_INS = {
    'ur': StandIn('ur', 'ur5_live.yaml',
                  ('-p', 'driver:=ur', '-p', 'publish_rate:=500.0', '-p', 'sim_rate:=2000.0',
                   '-p', 'true_damping:=0.3'),
                  ((-0.03, 0.03), (0.04, 0.12), (-0.03, 0.03)), (1.0, 4.0)),
    'franka': StandIn('franka', 'panda_live.yaml',
                      ('-p', 'driver:=franka', '-p', 'publish_rate:=1000.0',
                       '-p', 'sim_rate:=4000.0', '-p', 'true_damping:=0.3',
                       '-p', 'true_coulomb:=0.5'),
                      ((-0.03, 0.03), (-0.03, 0.03), (0.05, 0.15)), (0.5, 2.5),
                      {'driver': 'franka', 'joint_states_topic': None}, from_description=True),
}
