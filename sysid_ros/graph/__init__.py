"""Factor graphs (GTSAM) for planar multibody dynamics: factors, smoothers, identification.

May import gtsam, numpy, jax and `sysid_ros.core`; never rclpy.
"""
