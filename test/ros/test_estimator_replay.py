"""A bag replayed into the estimator with `use_sim_time` (slow: the estimator compiles).

`bag_player` plays a simulated double-pendulum recording (stamps from t = 0) with /clock into
an `estimator` running on sim time: its lag (window end to publish, in its node clock) is
then seconds, where on the wall clock it would be the ~1.8e9 s since 1970. Playing the bag
again is a jump back in time: the window buffer is cleared (counted in the diagnostics) and
the estimates go on from the second replay.
"""

from diagnostic_msgs.msg import DiagnosticArray
import pytest

from sysid_ros.io import bag_writer, pipeline
from sysid_ros.ros.estimate_client import EstimateClient

CONFIG = 'config/double_pendulum_live.yaml'
DURATION = 12.0                                 # [s] of recording
START_TIMEOUT = 600.0                           # [s] imports + compilation on a busy machine


def _values(diagnostics: list, suffix: str) -> dict:
    """Key -> value of the status named `...suffix` in the last DiagnosticArray ({} if none)."""
    for status in diagnostics[-1].status if diagnostics else ():
        if status.name.endswith(suffix):
            return {kv.key: kv.value for kv in status.values}
    return {}


@pytest.mark.slow
def test_a_replayed_bag_runs_on_sim_time_and_a_restart_clears_the_window(
        start_node, ros, tmp_path):
    problem = pipeline.build_problem(CONFIG)
    traj = pipeline.simulate(problem, duration=DURATION, noise=0.002, seed=5)
    bag = tmp_path / 'bag'
    bag_writer.write_trajectory_bag(bag, [traj])
    estimates, diagnostics = [], []
    client = EstimateClient(ros.node, '/estimator/estimate', callback=estimates.append)
    sub = ros.node.create_subscription(DiagnosticArray, '/diagnostics',
                                       diagnostics.append, 10)
    try:
        est = start_node('sysid_ros.ros.estimator', '--params-file', CONFIG,
                         '-p', 'use_sim_time:=true',
                         '-p', f'online.save_path:={tmp_path / "posterior"}')

        def play():
            return start_node('sysid_ros.ros.bag_player', '-p', f'bag:={bag}',
                              '-p', 'wait_for_subscribers:=1', '-p', 'wait_timeout:=120.0')

        first = play()
        assert ros.spin_until(lambda: estimates or not est.running(), START_TIMEOUT), \
            est.output()
        assert est.running(), est.output()
        assert first.wait(60.0) == 0, first.output()
        assert ros.spin_until(lambda: 'lag_s' in _values(diagnostics, 'estimator'), 30.0)
        lag = float(_values(diagnostics, 'estimator')['lag_s'])
        assert 0.0 <= lag < DURATION, lag          # sim time, not 1.8e9 s of wall clock

        count = len(estimates)
        second = play()
        assert ros.spin_until(lambda: int(_values(diagnostics, 'window buffer').get(
            'time_jumps', 0)) >= 1, 60.0), est.output()
        assert ros.spin_until(lambda: len(estimates) > count, 60.0), est.output()
        assert second.wait(60.0) == 0, second.output()
        assert est.running()
    finally:
        ros.node.destroy_subscription(sub)
        ros.node.destroy_subscription(client.subscription)
