"""The estimator as a managed (lifecycle) node, driven through its lifecycle services over
real DDS as `ros2 lifecycle set` and launch_ros do: started with `autostart:=false` beside
`sim_robot`, it waits unconfigured; configure compiles; only an active node publishes
estimates; deactivate stops them; cleanup writes the posterior; transitions out of order are
refused and leave the state as it was."""

import pathlib

from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState, GetState
import numpy as np
import pytest

from sysid_ros.io import posterior_files
from sysid_ros.ros.estimate_client import EstimateClient

CONFIG = 'config/double_pendulum_live.yaml'
NODE = '/sysid/estimator'
CONFIGURE_TIMEOUT = 300.0                       # [s] compilation on a busy machine
QUIET = 4.0                                     # [s] more than a window and its inference


@pytest.fixture(scope='module')
def managed(start_node, ros, tmp_path_factory):
    """sim_robot + an estimator with autostart off; the estimates the test node receives."""
    save = tmp_path_factory.mktemp('posterior') / 'managed'
    sim = start_node('sysid_ros.ros.sim_robot', '-p', f'config:={CONFIG}', '-p', 'seed:=5')
    est = start_node('sysid_ros.ros.estimator', '-r', '__ns:=/sysid', '--params-file', CONFIG,
                     '-p', 'autostart:=false', '-p', f'online.save_path:={save}')
    estimates = []
    client = EstimateClient(ros.node, f'{NODE}/estimate', callback=estimates.append)
    yield {'est': est, 'sim': sim, 'estimates': estimates, 'save': save}
    ros.node.destroy_subscription(client.subscription)


def _state(ros) -> str:
    return ros.call(GetState, f'{NODE}/get_state', GetState.Request(),
                    timeout=60.0).current_state.label


def _change(ros, transition: int, timeout: float = 30.0) -> bool:
    request = ChangeState.Request(transition=Transition(id=transition))
    return ros.call(ChangeState, f'{NODE}/change_state', request, timeout=timeout).success


def test_transitions_in_order_and_out_of_order(managed, ros):
    est, estimates = managed['est'], managed['estimates']
    assert _state(ros) == 'unconfigured'
    # Out of order: activate before configure is refused, nothing changes.
    assert not _change(ros, Transition.TRANSITION_ACTIVATE)
    assert _state(ros) == 'unconfigured'

    assert _change(ros, Transition.TRANSITION_CONFIGURE, CONFIGURE_TIMEOUT), est.output()
    assert 'estimator compiled in' in est.output()
    assert _state(ros) == 'inactive'
    assert not _change(ros, Transition.TRANSITION_CONFIGURE)      # configured already
    ros.spin_for(QUIET)
    assert estimates == []                      # inactive: nothing consumed or published

    assert _change(ros, Transition.TRANSITION_ACTIVATE)
    assert _state(ros) == 'active'
    assert ros.spin_until(lambda: len(estimates) >= 2, 60.0), est.output()

    assert _change(ros, Transition.TRANSITION_DEACTIVATE)
    assert _state(ros) == 'inactive'
    ros.spin_for(QUIET)                         # a window in flight may still finish
    count = len(estimates)
    ros.spin_for(QUIET)
    assert len(estimates) == count

    assert not _change(ros, Transition.TRANSITION_DEACTIVATE)     # inactive already
    assert _change(ros, Transition.TRANSITION_CLEANUP)
    assert _state(ros) == 'unconfigured'
    npz = pathlib.Path(posterior_files.posterior_paths(managed['save'])[0])
    particles = posterior_files.load_posterior(npz, list(estimates[-1]))
    assert particles.shape == (16, 4) and np.all(np.isfinite(particles))

    # Configured again (its read-only parameters kept), then shut down from inactive: a
    # posterior that saw no window does not overwrite the saved one.
    assert _change(ros, Transition.TRANSITION_CONFIGURE, CONFIGURE_TIMEOUT), est.output()
    assert _state(ros) == 'inactive'
    saved_at = npz.stat().st_mtime_ns
    assert _change(ros, Transition.TRANSITION_INACTIVE_SHUTDOWN)
    assert _state(ros) == 'finalized'
    assert npz.stat().st_mtime_ns == saved_at
    assert not _change(ros, Transition.TRANSITION_CONFIGURE)
    assert est.interrupt(timeout=30.0) == 0, est.output()
