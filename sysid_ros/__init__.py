"""sysid_ros: identification of robot dynamic parameters from ROS 2 sensor streams."""
