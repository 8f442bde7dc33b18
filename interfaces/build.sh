#!/usr/bin/env bash
# Builds the interface packages into a prefix made of PyPI's ROS 2 wheels (the Makefile's .venv):
#   interfaces/build.sh PREFIX
# sysid_ros_interfaces, and the subsets of control_msgs, franka_msgs and ur_msgs in upstream/
# (the vendors' own definition files, for the stand-in robots where the vendor packages are not
# installed). In a ROS 2 workspace colcon builds sysid_ros_interfaces itself and skips upstream/.
set -euo pipefail
prefix=$(realpath "$1")
here=$(dirname "$(realpath "${BASH_SOURCE[0]}")")
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
export PATH="$prefix/bin:$PATH" AMENT_PREFIX_PATH="$prefix" CMAKE_PREFIX_PATH="$prefix"
command -v cmake >/dev/null || { echo "error: building the interfaces needs cmake (pip install cmake)" >&2; exit 1; }
for package in upstream/control_msgs upstream/franka_msgs upstream/ur_msgs sysid_ros_interfaces; do
    name=$(basename "$package")
    echo "interfaces: $name"
    if ! { cmake -S "$here/$package" -B "$build/$name" -DCMAKE_INSTALL_PREFIX="$prefix" \
               -DPython3_EXECUTABLE="$prefix/bin/python" -DBUILD_TESTING=OFF \
               -Drosidl_core_generators_DIR="$here/cmake" \
           && cmake --build "$build/$name" -j "$(nproc)" \
           && cmake --install "$build/$name"; } >"$build/$name.log" 2>&1; then
        tail -40 "$build/$name.log" >&2
        echo "error: building the interface package $name failed (log above)" >&2
        exit 1
    fi
done
