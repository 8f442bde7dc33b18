"""A stand-in joint_trajectory_controller: an rclpy ActionServer of the real
control_msgs/action/FollowJointTrajectory, for the tests of what sends it goals."""

import time

from control_msgs.action import FollowJointTrajectory
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.task import Future

from sysid_ros.ros import trajectory_action

FEEDBACK_LEAD = 1.0                             # [s] the stand-in's feedback before its result


class StandInController:
    """A joint_trajectory_controller's action (`mode`: 'succeed', 'reject', 'abort' with
    PATH_TOLERANCE_VIOLATED, or 'hold' until cancelled) that records the goals it accepts
    and the cancel requests; it answers `lead` seconds after its feedback [s]; `succeeded_at`
    is the time.monotonic() of its last success."""

    def __init__(self, node, controller: str, mode: str = 'succeed',
                 lead: float = FEEDBACK_LEAD):
        self.mode, self.lead = mode, lead
        self.goals = []
        self.cancelled = []
        self.succeeded_at = None
        self._released = None
        self.server = ActionServer(
            node, FollowJointTrajectory, trajectory_action.action_name(controller),
            self._execute, goal_callback=self._decide, cancel_callback=self._cancel)

    def _decide(self, goal):
        if self.mode == 'reject':
            return GoalResponse.REJECT
        self.goals.append(goal)
        return GoalResponse.ACCEPT

    def _cancel(self, goal_handle):
        self.cancelled.append(goal_handle)
        if self._released is not None:
            self._released.set_result(None)
        return CancelResponse.ACCEPT

    async def _execute(self, goal_handle):
        points = goal_handle.request.trajectory.points
        feedback = FollowJointTrajectory.Feedback()
        for point in points[::len(points) // 4]:
            feedback.desired = point
            goal_handle.publish_feedback(feedback)
        # A controller runs the trajectory before it answers: its feedback comes first.
        time.sleep(self.lead)
        if self.mode == 'hold':
            self._released = Future()
            await self._released
            goal_handle.canceled()
            return FollowJointTrajectory.Result()
        if self.mode == 'abort':
            goal_handle.abort()
            return FollowJointTrajectory.Result(
                error_code=FollowJointTrajectory.Result.PATH_TOLERANCE_VIOLATED,
                error_string='joint1 path error 0.2 beyond 0.05')
        goal_handle.succeed()
        self.succeeded_at = time.monotonic()
        return FollowJointTrajectory.Result(error_code=FollowJointTrajectory.Result.SUCCESSFUL)

    def destroy(self):
        self.server.destroy()
