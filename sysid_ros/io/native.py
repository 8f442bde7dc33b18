"""The native CPU kernels of the dynamics: building the shared library and registering it.

`sysid_ros/native/dynamics_ffi.cc` holds XLA FFI handlers around Pinocchio's batched ABA, its
derivatives and its joint-torque regressor (issue 18's CPU path). This module compiles it
(`python -m sysid_ros.io.native`, which `make .venv` runs after pip) and registers its targets
with JAX, so that `sysid_ros.core.dynamics.native` can call them. The core itself only names the
targets: it neither loads files nor touches global state.

The compiler is g++ (C++17) on the headers that pip installed: JAX's FFI headers
(`jax.ffi.include_dir()`), Pinocchio and Boost (`cmeel.prefix/include` of the `pin` wheel) and
Eigen (the `cmeel-eigen` wheel). Nothing is linked: Pinocchio's templates are instantiated in the
library itself, with `-O3 -march=native` (the library is built on the machine that runs it; copy
it to another CPU model and it may not load).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import sysconfig
import time

import jax

SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'native',
                      'dynamics_ffi.cc')
LIBRARY = os.path.join(os.path.dirname(SOURCE), 'libsysid_dynamics.so')
# FFI target name -> exported symbol of the library.
TARGETS = {'sysid_aba': 'SysidAba', 'sysid_aba_vjp': 'SysidAbaVjp'}
# What Pinocchio's CMake config (target pinocchio_headers) sets for its Boost variant of 25 joint
# types.
_DEFINES = ('NDEBUG', 'BOOST_MPL_LIMIT_LIST_SIZE=30', 'BOOST_MPL_LIMIT_VECTOR_SIZE=30',
            'BOOST_MPL_CFG_NO_PREPROCESSED_HEADERS', 'BOOST_FUSION_INVOKE_MAX_ARITY=12')

_registered = False


class NativeError(RuntimeError):
    """The native library cannot be built or loaded."""


def compile_command(output: str = LIBRARY) -> list[str]:
    """The g++ command line that builds the library from `SOURCE` into `output`."""
    prefix = os.path.join(sysconfig.get_paths()['purelib'], 'cmeel.prefix', 'include')
    return [os.environ.get('CXX', 'g++'), '-std=c++17', '-O3', '-march=native', '-shared',
            '-fPIC', '-fvisibility=hidden', '-pthread',
            *(f'-D{d}' for d in _DEFINES),
            f'-I{jax.ffi.include_dir()}', f'-I{prefix}', f'-I{os.path.join(prefix, "eigen3")}',
            SOURCE, '-o', output]


def build(force: bool = False, verbose: bool = True) -> str:
    """Compile the library unless it is newer than its source; returns its path.

    Raises:
      NativeError: no compiler, missing headers or a compile error (its output included).
    """
    if not force and os.path.isfile(LIBRARY) and (
            os.path.getmtime(LIBRARY) >= os.path.getmtime(SOURCE)):
        return LIBRARY
    command = compile_command(LIBRARY + '.tmp')
    if shutil.which(command[0]) is None:
        raise NativeError(f'{command[0]}: C++ compiler not found (set CXX or install g++)')
    if verbose:
        print(' '.join(command), flush=True)
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise NativeError(f'{SOURCE}: compile failed:\n{result.stderr[-4000:]}')
    os.replace(LIBRARY + '.tmp', LIBRARY)
    if verbose:
        print(f'built {LIBRARY} in {time.perf_counter() - start:.0f} s', flush=True)
    return LIBRARY


def register(path: str = LIBRARY) -> None:
    """Load the library and register its FFI targets for the CPU (once per process).

    Raises:
      NativeError: the library is missing (build it: `make .venv` or
        `python -m sysid_ros.io.native`) or does not load.
    """
    global _registered
    if not os.path.isfile(path):
        raise NativeError(f'{path}: not built; run `make .venv` (or '
                          f'`{sys.executable} -m sysid_ros.io.native`)')
    if _registered:
        return
    try:
        library = ctypes.cdll.LoadLibrary(path)
    except OSError as exc:
        raise NativeError(f'{path}: cannot load: {exc}') from exc
    for target, symbol in TARGETS.items():
        jax.ffi.register_ffi_target(target, jax.ffi.pycapsule(getattr(library, symbol)),
                                    platform='cpu')
    _registered = True


def available() -> bool:
    """True when the library is built (whether or not it is registered yet)."""
    return _registered or os.path.isfile(LIBRARY)


if __name__ == '__main__':
    try:
        build(force='--force' in sys.argv)
    except NativeError as exc:
        sys.exit(f'error: {exc}')
