from glob import glob
import os

from setuptools import find_packages, setup

package_name = 'sysid_ros'

setup(
    name=package_name,
    version='0.1.0',
    packages=find_packages(exclude=['test', 'test.*']),
    # The jinja2 template of report.html (io/html_report.py), loaded from the package.
    package_data={'sysid_ros.io': ['templates/*.j2']},
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + package_name]),
        ('share/' + package_name, ['package.xml']),
        (os.path.join('share', package_name, 'launch'), glob('launch/*.launch.py')),
        (os.path.join('share', package_name, 'config'),
         glob('config/*.yaml') + glob('config/*.xml')),
    ],
    python_requires='>=3.10',
    install_requires=[
        'numpy>=1.26',
        'scipy>=1.11',
        'jax>=0.4.30',
        'jaxlib>=0.4.30',
        'optax>=0.2',
        'pin>=3.0',
        'pyyaml>=6.0',
        'matplotlib>=3.8',
        'rosbags>=0.10',
        'jinja2>=3.0',
        'corner>=2.2',
        'tqdm>=4.60',
    ],
    # `sysid fleet` (sysid_ros/cli_fleet.py) runs its fits on Ray.
    extras_require={'fleet': ['ray>=2.40']},
    zip_safe=True,
    maintainer='sysid_ros developers',
    maintainer_email='sysid-ros@example.com',
    description='Identification of robot dynamic parameters from ROS 2 sensor streams with JAX.',
    license='Apache-2.0',
    tests_require=['pytest'],
    entry_points={
        'console_scripts': [
            'sysid = sysid_ros.cli:main',
            'sim_robot = sysid_ros.ros.sim_robot:main',
            'estimator = sysid_ros.ros.estimator:main',
            'bag_player = sysid_ros.ros.bag_player:main',
            'trajectory_publisher = sysid_ros.ros.trajectory_publisher:main',
        ],
    },
)
