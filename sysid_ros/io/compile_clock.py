"""Where a command's time goes on JAX programs: tracing, compiling, or loading them from the
persistent compilation cache (`jax_compilation_cache_dir`, set by the `sysid` entry point).

`CompileClock` listens to JAX's monitoring events while it is open. Every program that runs
for the first time in a process is traced and lowered, then compiled by XLA or, where the
persistent cache holds it, loaded from disk; a second `sysid fit` of the same problem loads
what the first compiled (programs that compiled faster than
`jax_persistent_cache_min_compile_time_secs` are not cached and compile again).
"""

from __future__ import annotations

import threading

from jax import monitoring

__all__ = ['CompileClock']

_TRACE_EVENTS = ('/jax/core/compile/jaxpr_trace_duration',
                 '/jax/core/compile/jaxpr_to_mlir_module_duration')
_BACKEND_EVENT = '/jax/core/compile/backend_compile_duration'
_CACHE_HIT_EVENT = '/jax/compilation_cache/cache_hits'


class CompileClock:
    """A context manager that adds up JAX's compile-time events while it is open.

    Attributes (`summary()`): trace_s, tracing and lowering to MLIR [s]; compile_s and
    programs_compiled, XLA compiles that missed the persistent cache [s], [-]; cache_load_s
    and programs_loaded, programs loaded from it [s], [-].
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._hit = threading.local()
        self.trace_s = self.compile_s = self.load_s = 0.0
        self.programs_compiled = self.programs_loaded = 0

    def _event(self, event: str, **_):
        if event == _CACHE_HIT_EVENT:
            self._hit.value = True

    def _duration(self, event: str, duration_secs: float, **_):
        with self._lock:
            if event in _TRACE_EVENTS:
                self.trace_s += duration_secs
            elif event == _BACKEND_EVENT:
                if getattr(self._hit, 'value', False):
                    self.load_s += duration_secs
                    self.programs_loaded += 1
                else:
                    self.compile_s += duration_secs
                    self.programs_compiled += 1
                self._hit.value = False

    def __enter__(self) -> 'CompileClock':
        monitoring.register_event_listener(self._event)
        monitoring.register_event_duration_secs_listener(self._duration)
        return self

    def __exit__(self, *exc) -> None:
        monitoring.unregister_event_listener(self._event)
        monitoring.unregister_event_duration_listener(self._duration)

    def summary(self) -> dict[str, float | int]:
        """The totals so far (class doc), seconds rounded to milliseconds."""
        with self._lock:
            return {'trace_s': round(self.trace_s, 3), 'compile_s': round(self.compile_s, 3),
                    'programs_compiled': self.programs_compiled,
                    'cache_load_s': round(self.load_s, 3),
                    'programs_loaded': self.programs_loaded}
