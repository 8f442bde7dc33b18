# rosidl_core_generators for a prefix built from PyPI's ROS 2 wheels, which ship the generators
# but not this package (a ROS 2 install has its own and never reads this file). It registers the
# C and Python generators with their C type supports, all that rclpy needs, and points the
# wheels' exported Python and NumPy include directories (paths on the machine that built the
# wheels) at this machine's.
set(rosidl_core_generators_FOUND TRUE)
find_package(rosidl_cmake REQUIRED)
foreach(_generator
    rosidl_generator_type_description
    rosidl_generator_c
    rosidl_typesupport_introspection_c
    rosidl_typesupport_fastrtps_c
    rosidl_typesupport_c
    rosidl_generator_py)
  find_package(${_generator} REQUIRED)
endforeach()
foreach(_interfaces service_msgs action_msgs)
  find_package(${_interfaces} REQUIRED)
endforeach()

find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Module)
execute_process(
  COMMAND "${Python3_EXECUTABLE}" -c "import numpy; print(numpy.get_include())"
  OUTPUT_VARIABLE _numpy_include OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
set(_wheel_python_include "${Python3_INCLUDE_DIRS}")
set(_wheel_numpy_include "${_numpy_include}")

function(_sysid_ros_local_wheel_includes)
  get_directory_property(_targets DIRECTORY "${CMAKE_SOURCE_DIR}" IMPORTED_TARGETS)
  foreach(_target ${_targets})
    get_target_property(_dirs ${_target} INTERFACE_INCLUDE_DIRECTORIES)
    if(_dirs MATCHES "/opt/python/")
      list(TRANSFORM _dirs REPLACE "^/opt/python/[^/]+/include/python[0-9.]+$"
        "${_wheel_python_include}")
      list(TRANSFORM _dirs REPLACE "^/opt/python/.*/numpy/_core/include$"
        "${_wheel_numpy_include}")
      set_target_properties(${_target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_dirs}")
    endif()
  endforeach()
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _sysid_ros_local_wheel_includes)
