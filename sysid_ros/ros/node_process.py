"""Nodes of this package started as separate processes, for the live demo and the tests.

    process = NodeProcess('sysid_ros.ros.sim_robot', ['-p', 'config:=...'], log_path, env)
    ...
    process.interrupt()        # SIGINT, as Ctrl-C; the node saves what it holds and exits

Each process runs `python -m MODULE --ros-args ...` with this interpreter, its output (stdout
and stderr) going to `log_path`, and is always reaped: `kill()` is safe to call twice.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
from typing import Mapping, Sequence

__all__ = ['NodeProcess']


class NodeProcess:
    """One node process; `env` replaces the environment (None: this process's)."""

    def __init__(self, module: str, ros_args: Sequence[str], log_path: str | os.PathLike,
                 env: Mapping[str, str] | None = None, cwd: str | os.PathLike | None = None):
        self.module = module
        self.log_path = pathlib.Path(log_path)
        self._log = open(self.log_path, 'w')
        self.proc = subprocess.Popen(
            [sys.executable, '-m', module, '--ros-args', *ros_args], cwd=cwd,
            env=None if env is None else dict(env), stdout=self._log, stderr=subprocess.STDOUT)

    def output(self) -> str:
        """Everything the node printed so far."""
        self._log.flush()
        return self.log_path.read_text()

    def running(self) -> bool:
        return self.proc.poll() is None

    def interrupt(self, timeout: float = 15.0) -> int:
        """SIGINT, as Ctrl-C; returns the exit status (kills it after `timeout` seconds)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.wait(timeout)

    def wait(self, timeout: float) -> int:
        """Exit status; kills the process (and raises TimeoutExpired) after `timeout` s."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()
