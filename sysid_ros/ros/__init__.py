"""Thin rclpy adapters: nodes, message conversions and ROS parameters."""
