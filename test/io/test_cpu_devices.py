"""`io.cpu_devices`: the XLA flag that splits the host into one CPU device per core."""

import os

from sysid_ros.io import cpu_devices


def test_split_appends_the_count_and_keeps_other_flags(monkeypatch):
    monkeypatch.setenv('XLA_FLAGS', '--xla_cpu_enable_fast_math=false')
    assert cpu_devices.split_host_devices(3) == 3
    assert os.environ['XLA_FLAGS'] == ('--xla_cpu_enable_fast_math=false '
                                       '--xla_force_host_platform_device_count=3')
    monkeypatch.delenv('XLA_FLAGS')
    assert cpu_devices.split_host_devices() == len(os.sched_getaffinity(0))


def test_a_count_the_user_set_wins(monkeypatch):
    monkeypatch.setenv('XLA_FLAGS', '--xla_force_host_platform_device_count=5')
    assert cpu_devices.split_host_devices(2) == 0
    assert os.environ['XLA_FLAGS'] == '--xla_force_host_platform_device_count=5'
