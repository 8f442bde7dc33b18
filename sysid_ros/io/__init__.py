"""ROS-free I/O: configuration, URDF loading, window buffers, rosbags and results."""
