"""Free physical parameters by name, and their maps to `Params` and to unconstrained space.

A `ParameterSpec` lists the parameters to identify, e.g. `link2.mass`, `link2.com.x`,
`link2.inertia.izz`, `joint1.damping`, `joint1.origin.yaw`, with bounds. It maps a flat vector
`theta` (M,) in physical units to `Params` and back, and `theta` to unconstrained virtual
coordinates `z` (M,) for optimisers and samplers (DiffNEA; Lutter et al. 2021, sec. 3.2).

Attributes of a link (the URDF child link of a joint; body frame = joint frame):
  `mass` [kg]; `com.x|y|z` centre of mass [m]; `inertia.ixx|ixy|ixz|iyy|iyz|izz` rotational
  inertia about the COM in the body axes [kg m^2] (the URDF `<inertial>` convention).
Attributes of a joint:
  `damping` [N m s/rad or N s/m]; `coulomb` [N m or N]; `stribeck.torque` [N m or N];
  `stribeck.velocity` [rad/s or m/s]; `armature` [kg m^2 or kg]; `offset` [N m or N], a
  signed constant torque the joint's sensor or actuator adds (`Params.offset`); `gain` [-],
  the torque the joint receives per unit of effort (`Params.gain`); `load_coulomb` [-], the
  Coulomb torque per unit of the torque the joint transmits (`Params.load_coulomb`);
  `origin.x|y|z`
  [m] and `origin.roll|pitch|yaw` [rad], the joint placement in the parent frame
  (`Params.placement`).
Attributes of the payload (`Payload`: a rigid body a body holds, e.g. a tool or a picked-up
object), named `payload.<attribute>`: `mass` [kg]; `com.x|y|z` its centre of mass [m] in the
payload frame; `inertia.ixx|ixy|ixz|iyy|iyz|izz` its rotational inertia about that centre in
the payload frame's axes [kg m^2] (zero where not given: a point mass).

The spec is a frozen dataclass of tuples: hashable, so it can be a static argument of `jax.jit`.
"""

import dataclasses
import functools
from typing import Iterable, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from sysid_ros.core.model import edits, inertia
from sysid_ros.core.model.types import Params, RobotModel

__all__ = [
    'INERTIA_ATTRIBUTES',
    'LINK_ATTRIBUTES',
    'JOINT_ATTRIBUTES',
    'ATTRIBUTES',
    'NONNEGATIVE_ATTRIBUTES',
    'PAYLOAD',
    'PAYLOAD_ATTRIBUTES',
    'Payload',
    'split_name',
    'is_friction_consistent',
    'ParameterSpec',
    'make_parameter_spec',
]

INERTIA_ATTRIBUTES = ('inertia.ixx', 'inertia.ixy', 'inertia.ixz',
                      'inertia.iyy', 'inertia.iyz', 'inertia.izz')
LINK_ATTRIBUTES = ('mass', 'com.x', 'com.y', 'com.z') + INERTIA_ATTRIBUTES
JOINT_ATTRIBUTES = ('damping', 'coulomb', 'stribeck.torque', 'stribeck.velocity', 'armature',
                    'offset', 'gain', 'load_coulomb', 'origin.x', 'origin.y', 'origin.z',
                    'origin.roll', 'origin.pitch', 'origin.yaw')
ATTRIBUTES = LINK_ATTRIBUTES + JOINT_ATTRIBUTES
# Quantities that cannot be negative (diagonal entries of a positive semi-definite inertia too).
NONNEGATIVE_ATTRIBUTES = frozenset(
    ('mass', 'inertia.ixx', 'inertia.iyy', 'inertia.izz',
     'damping', 'coulomb', 'stribeck.torque', 'stribeck.velocity', 'armature', 'gain',
     'load_coulomb'))

PAYLOAD = 'payload'                  # object name of the payload's parameters
PAYLOAD_ATTRIBUTES = ('mass', 'com.x', 'com.y', 'com.z') + INERTIA_ATTRIBUTES
_PAYLOAD_BODY = -1                   # `ParameterSpec.bodies` entry of a payload parameter

# Column of each attribute in the per-body table built by `_table` (nb, 24).
_COLUMN = {a: i for i, a in enumerate(ATTRIBUTES)}
_NUM_LINK_COLUMNS = len(LINK_ATTRIBUTES)
_INERTIA_COLUMNS = tuple(_COLUMN[a] for a in INERTIA_ATTRIBUTES)
# Params field written from each joint column.
_JOINT_FIELD = {'damping': 'damping', 'coulomb': 'coulomb', 'stribeck.torque': 'stribeck',
                'stribeck.velocity': 'stribeck', 'armature': 'armature', 'offset': 'offset',
                'gain': 'gain', 'load_coulomb': 'load_coulomb'}
_JOINT_FIELD.update({a: 'placement' for a in JOINT_ATTRIBUTES if a.startswith('origin.')})

# Elementwise bijections R -> (lo, hi), chosen per parameter from its bounds.
_IDENTITY, _LOWER, _UPPER, _INTERVAL = 0, 1, 2, 3


def split_name(name: str) -> tuple[str, str]:
    """'link2.com.x' -> ('link2', 'com.x'). Link or joint names may themselves contain dots.

    Raises:
      ValueError: if the name does not end in '.<attribute>' for a known attribute.
    """
    for attribute in ATTRIBUTES:
        suffix = '.' + attribute
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[:-len(suffix)], attribute
    raise ValueError(
        f'unknown parameter {name!r}: expected <link>.<attribute> with attribute in '
        f'({", ".join(LINK_ATTRIBUTES)}) or <joint>.<attribute> with attribute in '
        f'({", ".join(JOINT_ATTRIBUTES)})')


def _table(params: Params) -> jax.Array:
    """Params -> (nb, 24) physical value of every attribute of every body, in ATTRIBUTES order."""
    mass, com, inertia_c = inertia.physical_from_inertial(params.inertial)
    columns = [mass, com[:, 0], com[:, 1], com[:, 2]]
    columns += list(jnp.moveaxis(inertia.inertia_entries(inertia_c), -1, 0))
    columns += [params.damping, params.coulomb, params.stribeck[:, 0], params.stribeck[:, 1],
                params.armature, params.offset, params.gain, params.load_coulomb]
    columns += [params.placement[:, k] for k in range(6)]
    dtype = jnp.result_type(*columns)
    return jnp.stack([c.astype(dtype) for c in columns], axis=-1)


def _inertia_from_six(six):
    """(..., 6) entries in INERTIA_ATTRIBUTES order -> (..., 3, 3)."""
    return inertia.inertia_matrix_from_entries(*(six[..., k] for k in range(6)))


def is_friction_consistent(params: Params) -> jax.Array:
    """Per joint: dissipative friction and non-negative armature (all finite).

    damping >= 0, coulomb >= 0, Stribeck torque and velocity >= 0, armature >= 0,
    0 <= load_coulomb < 1 (a joint cannot lose more than the torque it transmits).

    Returns:
      (nb,) bool.
    """
    values = jnp.concatenate([params.damping[..., None], params.coulomb[..., None],
                              params.stribeck, params.armature[..., None],
                              params.load_coulomb[..., None]], axis=-1)
    return (jnp.all(jnp.isfinite(values) & (values >= 0.0), axis=-1)
            & (params.load_coulomb < 1.0))


@dataclasses.dataclass(frozen=True)
class Payload:
    """A rigid body held by a body, whose mass, centre of mass and inertia `payload.*`
    parameters name.

    Attributes:
      body: index of the body that holds it.
      rotation: (9,) rotation of the payload frame in the body frame, row-major.
      translation: (3,) origin of the payload frame in the body frame [m].
      mass: nominal mass [kg]: its value where `payload.mass` is not free.
      com: (3,) nominal centre of mass in the payload frame [m].
      inertia: (6,) nominal rotational inertia about the centre of mass in the payload
        frame's axes, INERTIA_ATTRIBUTES order [kg m^2] (zero: a point mass).
    """

    body: int
    rotation: tuple[float, ...] = (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0)
    translation: tuple[float, float, float] = (0.0, 0.0, 0.0)
    mass: float = 0.0
    com: tuple[float, float, float] = (0.0, 0.0, 0.0)
    inertia: tuple[float, ...] = (0.0,) * len(INERTIA_ATTRIBUTES)

    @property
    def nominal(self) -> tuple[float, ...]:
        """The nominal values in PAYLOAD_ATTRIBUTES order."""
        return (self.mass,) + tuple(self.com) + tuple(self.inertia)

    def add_to(self, params: Params, values) -> Params:
        """Params with the payload of `values` (10,) (PAYLOAD_ATTRIBUTES order) added to its
        body's inertial parameters (`edits.add_rigid_body`, in the body's frame)."""
        values = jnp.asarray(values)
        rotation = jnp.asarray(self.rotation, values.dtype).reshape(3, 3)
        position = rotation @ values[1:4] + jnp.asarray(self.translation, values.dtype)
        inertia_c = rotation @ _inertia_from_six(values[4:10]) @ rotation.T
        return edits.add_rigid_body(params, self.body, values[0], position, inertia_c)

    def inertia_consistent(self, values, atol: float, rtol: float) -> jax.Array:
        """() bool: the inertia of `values` (10,) (PAYLOAD_ATTRIBUTES order) about the
        payload's centre of mass is that of a real body (`inertia.is_inertia_consistent`)."""
        return inertia.is_inertia_consistent(_inertia_from_six(jnp.asarray(values)[4:10]),
                                             atol=atol, rtol=rtol)


class _Layout:
    """Static index arrays derived from a spec (computed once per spec)."""

    def __init__(self, spec: 'ParameterSpec'):
        m = len(spec.names)
        bodies = np.asarray(spec.bodies, dtype=np.int32).reshape(m)
        # Entries of the per-body table (`_table`); payload entries live apart from it.
        self.in_table = np.flatnonzero(bodies != _PAYLOAD_BODY)
        self.bodies = bodies[self.in_table]
        self.columns = np.asarray([_COLUMN[spec.attributes[k]] for k in self.in_table],
                                  dtype=np.int32)
        # theta index of each payload attribute, -1 where it keeps its nominal value.
        where = {spec.attributes[k]: k for k in np.flatnonzero(bodies == _PAYLOAD_BODY)}
        self.payload_theta = np.asarray([where.get(a, -1) for a in PAYLOAD_ATTRIBUTES],
                                        np.int32)
        self.links = tuple(sorted({b for b, c in zip(self.bodies, self.columns)
                                   if c < _NUM_LINK_COLUMNS}))
        self.joints = tuple(sorted({b for b, c in zip(self.bodies, self.columns)
                                    if c >= _NUM_LINK_COLUMNS}))
        self.joint_fields = tuple(sorted({_JOINT_FIELD[a] for a in spec.attributes
                                          if a in _JOINT_FIELD}))
        # DiffNEA blocks: links whose six inertia entries are all free.
        where = {(b, a): k for k, (b, a) in enumerate(zip(spec.bodies, spec.attributes))
                 if b != _PAYLOAD_BODY}
        blocks = [b for b in self.links if all((b, a) in where for a in INERTIA_ATTRIBUTES)]
        self.block_theta = np.asarray(
            [[where[(b, a)] for a in INERTIA_ATTRIBUTES] for b in blocks], np.int32).reshape(-1, 6)
        self.block_z = np.sort(self.block_theta, axis=-1)
        # Elementwise bijection per parameter.
        lo = np.asarray(spec.lower_bounds, dtype=float).reshape(m)
        hi = np.asarray(spec.upper_bounds, dtype=float).reshape(m)
        has_lo, has_hi = np.isfinite(lo), np.isfinite(hi)
        self.kind = np.where(has_lo & has_hi, _INTERVAL,
                             np.where(has_lo, _LOWER, np.where(has_hi, _UPPER, _IDENTITY)))
        self.lo = np.where(has_lo, lo, 0.0)                 # safe constants: no inf in any branch
        self.hi = np.where(has_hi, hi, 0.0)
        self.width = np.where(self.kind == _INTERVAL, hi - lo, 1.0)


@dataclasses.dataclass(frozen=True)
class ParameterSpec:
    """The free physical parameters, by name, with bounds (build with `make_parameter_spec`).

    Attributes:
      names: (M,) parameter names, e.g. 'link2.mass', in the order of `theta`.
      bodies: (M,) index of the body (link or joint) each parameter belongs to.
      attributes: (M,) attribute of each parameter, e.g. 'mass', 'com.x', 'damping'.
      lower_bounds, upper_bounds: (M,) bounds in physical units (may be -inf / inf).
      init_values: (M,) initial value of each parameter, or None to take it from the base
        `Params` (see `initial_theta`); empty when no initial values were given.
      payload: the payload that `payload.*` parameters name (body -1 in `bodies`), or None.
        When set, `to_params` always adds it (with its nominal values where not free).

    Unconstrained coordinates (`to_unconstrained` / `from_unconstrained`): each parameter gets
    an elementwise bijection chosen by its bounds, [lo, hi] -> lo + (hi - lo) sigmoid(z),
    [lo, inf) -> lo + softplus(z), (-inf, hi] -> hi - softplus(-z), unbounded -> z. When all six
    inertia entries of a link are free they are instead mapped together through DiffNEA's
    virtual inertia (`inertia.inertia_from_virtual`: z holds sqrt_l (3) and the rpy (3) of the
    principal axes in the slots of those six names, in the order of `names`), so that every z
    gives a physically consistent inertia; their bounds then only serve initialisation
    (`sample_uniform`, `initial_theta`) and reporting, and `from_unconstrained` may leave them.
    A payload's inertia entries stay elementwise (a payload often starts as a point mass, zero
    inertia, where the virtual inertia's gradient vanishes); `is_consistent` checks them.
    """

    names: tuple[str, ...]
    bodies: tuple[int, ...]
    attributes: tuple[str, ...]
    lower_bounds: tuple[float, ...]
    upper_bounds: tuple[float, ...]
    init_values: tuple[float | None, ...] = ()
    payload: Payload | None = None

    def __post_init__(self):
        m = len(self.names)
        lengths = (len(self.bodies), len(self.attributes), len(self.lower_bounds),
                   len(self.upper_bounds))
        if any(n != m for n in lengths) or len(self.init_values) not in (0, m):
            raise ValueError(f'ParameterSpec fields must all have {m} entries')
        unknown = sorted(set(self.attributes) - set(ATTRIBUTES))
        if unknown:
            raise ValueError(f'ParameterSpec: unknown attributes {unknown}')
        if self.payload is None and _PAYLOAD_BODY in self.bodies:
            raise ValueError('ParameterSpec: payload parameters without a payload')

    @functools.cached_property
    def _layout(self) -> _Layout:
        return _Layout(self)

    # -- sizes, names and bounds -------------------------------------------------------------

    @property
    def num_params(self) -> int:
        """M, the length of `theta`."""
        return len(self.names)

    @property
    def lower(self) -> jax.Array:
        """(M,) lower bounds (-inf where none)."""
        return jnp.asarray(self.lower_bounds, dtype=float)

    @property
    def upper(self) -> jax.Array:
        """(M,) upper bounds (inf where none)."""
        return jnp.asarray(self.upper_bounds, dtype=float)

    @property
    def diffnea_links(self) -> tuple[int, ...]:
        """Bodies whose six inertia entries use DiffNEA virtual coordinates."""
        return tuple(int(self.bodies[k[0]]) for k in self._layout.block_theta)

    def index(self, name: str) -> int:
        """Position of `name` in `theta`; raises ValueError naming the valid names."""
        try:
            return self.names.index(name)
        except ValueError:
            raise ValueError(f'{name!r} is not a free parameter; free: '
                             f'{", ".join(self.names)}') from None

    # -- physical theta <-> Params -----------------------------------------------------------

    def to_params(self, theta: jax.Array, base: Params) -> Params:
        """Write the physical values `theta` into a copy of `base`.

        A link with any inertial entry in the spec gets its 10-vector recomputed from
        (mass, com, inertia about the COM), the entries not in the spec being those of `base`:
        freeing `link2.com.x` alone moves the COM and keeps the mass and the inertia about the
        COM. A spec with a `payload` adds it last. Fields not named by the spec are returned
        unchanged. jit-able; vmap over `theta` (P, M) with
        `jax.vmap(spec.to_params, in_axes=(0, None))`.

        Args:
          theta: (M,) physical values, in the order of `names`.
          base: Params (unbatched) supplying every value not in the spec.

        Returns:
          Params.
        """
        layout = self._layout
        theta = jnp.asarray(theta)
        params = self._write_table(theta[layout.in_table], base)
        if self.payload is None:
            return params
        return self.payload.add_to(params, self._payload_values(theta))

    def _payload_values(self, theta: jax.Array) -> jax.Array:
        """(10,) the payload's values (PAYLOAD_ATTRIBUTES order): theta's where free, else
        nominal."""
        index = self._layout.payload_theta
        nominal = jnp.asarray(self.payload.nominal, theta.dtype)
        return jnp.where(index >= 0, theta[jnp.maximum(index, 0)], nominal)

    def _write_table(self, values: jax.Array, base: Params) -> Params:
        """`base` with the table entries of the spec set to `values` (the theta entries that
        are not the payload's)."""
        layout = self._layout
        if values.shape[0] == 0:
            return base
        table = _table(base)
        table = table.astype(jnp.result_type(table, values))
        table = table.at[layout.bodies, layout.columns].set(values)
        updates = {}
        if layout.links:
            links = np.asarray(layout.links)
            rows = table[links]
            inertial = inertia.inertial_from_physical(
                rows[:, 0], rows[:, 1:4], _inertia_from_six(rows[:, 4:10]))
            updates['inertial'] = base.inertial.at[links].set(
                inertial.astype(base.inertial.dtype))
        joint_values = {
            'damping': table[:, _COLUMN['damping']],
            'coulomb': table[:, _COLUMN['coulomb']],
            'armature': table[:, _COLUMN['armature']],
            'offset': table[:, _COLUMN['offset']],
            'gain': table[:, _COLUMN['gain']],
            'load_coulomb': table[:, _COLUMN['load_coulomb']],
            'stribeck': table[:, _COLUMN['stribeck.torque']:_COLUMN['stribeck.velocity'] + 1],
            'placement': table[:, _COLUMN['origin.x']:_COLUMN['origin.yaw'] + 1],
        }
        for name in layout.joint_fields:
            updates[name] = joint_values[name].astype(getattr(base, name).dtype)
        return dataclasses.replace(base, **updates)

    def from_params(self, params: Params) -> jax.Array:
        """Read the named physical values from `params`: (M,) theta. Inverse of `to_params`,
        except for payload parameters: `Params` hold the payload only inside its body's
        inertial parameters, so those are its nominal values."""
        layout = self._layout
        theta = jnp.zeros((self.num_params,), params.inertial.dtype)
        if len(layout.in_table):
            theta = theta.at[layout.in_table].set(_table(params)[layout.bodies, layout.columns])
        free = layout.payload_theta >= 0
        if np.any(free):
            nominal = np.asarray(self.payload.nominal, float)
            theta = theta.at[layout.payload_theta[free]].set(nominal[free])
        return theta

    def initial_theta(self, base: Params) -> jax.Array:
        """Return the (M,) starting point.

        `init_values` where given, else the value in `base`, clipped into the bounds.
        """
        theta = self.from_params(base)
        if self.init_values:
            given = np.asarray([v is not None for v in self.init_values])
            values = np.asarray([0.0 if v is None else v for v in self.init_values])
            theta = jnp.where(given, values.astype(theta.dtype), theta)
        return jnp.clip(theta, self.lower.astype(theta.dtype), self.upper.astype(theta.dtype))

    # -- physical theta <-> unconstrained z --------------------------------------------------

    def from_unconstrained(self, z: jax.Array) -> jax.Array:
        """Map unconstrained (..., M) z to physical (..., M) theta.

        Elementwise entries land within their bounds, DiffNEA blocks on a physically
        consistent inertia (see the class docstring).
        """
        layout = self._layout
        z = jnp.asarray(z)
        z = z.astype(jnp.result_type(z, float))
        lo, hi, width = (jnp.asarray(a, z.dtype) for a in (layout.lo, layout.hi, layout.width))
        theta = jnp.select(
            [layout.kind == _LOWER, layout.kind == _UPPER, layout.kind == _INTERVAL],
            [lo + jax.nn.softplus(z), hi - jax.nn.softplus(-z), lo + width * jax.nn.sigmoid(z)],
            z)
        if len(layout.block_theta):
            virtual = z[..., layout.block_z]                    # (..., B, 6)
            inertia_c = inertia.inertia_from_virtual(virtual[..., :3], virtual[..., 3:])
            theta = theta.at[..., layout.block_theta].set(inertia.inertia_entries(inertia_c))
        return theta

    def to_unconstrained(self, theta: jax.Array) -> jax.Array:
        """Map physical (..., M) theta to unconstrained z; `from_unconstrained` inverts it.

        Values on or beyond a bound are first moved inside it by one machine epsilon
        (relative to the width of a finite interval), so z stays finite. An inconsistent
        inertia in a DiffNEA block is projected onto the consistent set.
        """
        layout = self._layout
        theta = jnp.asarray(theta)
        theta = theta.astype(jnp.result_type(theta, float))
        eps = jnp.finfo(theta.dtype).eps
        lo, hi, width = (jnp.asarray(a, theta.dtype)
                         for a in (layout.lo, layout.hi, layout.width))
        u = jnp.clip((theta - lo) / width, eps, 1.0 - eps)
        z = jnp.select(
            [layout.kind == _LOWER, layout.kind == _UPPER, layout.kind == _INTERVAL],
            [inertia.softplus_inverse(jnp.maximum(theta - lo, eps)),
             -inertia.softplus_inverse(jnp.maximum(hi - theta, eps)),
             jnp.log(u) - jnp.log1p(-u)],
            theta)
        if len(layout.block_theta):
            inertia_c = _inertia_from_six(theta[..., layout.block_theta])   # (..., B, 3, 3)
            sqrt_l, rpy = inertia.virtual_from_inertia(inertia_c)
            z = z.at[..., layout.block_z].set(jnp.concatenate([sqrt_l, rpy], axis=-1))
        return z

    # -- checks and sampling -----------------------------------------------------------------

    def range_width(self, theta: jax.Array) -> jax.Array:
        """(M,) the range of each parameter [physical units]: its bounds' width where both
        are finite, else |theta| + 1 (theta (M,) the values the range is judged at)."""
        width = self.upper - self.lower
        return jnp.where(jnp.isfinite(width), width, jnp.abs(jnp.asarray(theta)) + 1.0)

    def within_bounds(self, theta: jax.Array) -> jax.Array:
        """(..., M) -> (...,) bool: every entry within [lower, upper]."""
        theta = jnp.asarray(theta)
        return jnp.all((theta >= self.lower) & (theta <= self.upper), axis=-1)

    def is_consistent(self, theta: jax.Array, base: Params, atol: float = 1e-10,
                      rtol: float = 1e-6) -> jax.Array:
        """Check that `to_params(theta, base)` is physically consistent where the spec touches it.

        Links named by the spec must pass `inertia.is_physically_consistent` (m > 0, inertia
        about the COM positive and within the triangle inequalities); joints named by the spec
        must pass `is_friction_consistent`; theta must be finite; the payload's body counts as
        named, and the payload's own inertia about its centre of mass must pass
        `inertia.is_inertia_consistent`. Bodies the spec does not name
        are not checked (a URDF may hold massless helper links). Bounds are not checked here
        (see `within_bounds`).

        Args:
          theta: (M,) physical values.
          base: Params.
          atol, rtol: tolerances of the inertia checks [kg m^2], [-].

        Returns:
          () bool.
        """
        layout = self._layout
        theta = jnp.asarray(theta)
        ok = jnp.all(jnp.isfinite(theta))
        params = self.to_params(theta, base)
        links = layout.links + ((self.payload.body,) if self.payload is not None else ())
        if links:
            pi = params.inertial[np.asarray(links)]
            ok &= jnp.all(inertia.is_physically_consistent(pi, atol=atol, rtol=rtol))
        if self.payload is not None:
            ok &= self.payload.inertia_consistent(self._payload_values(theta), atol, rtol)
        if layout.joints:
            ok &= jnp.all(is_friction_consistent(params)[np.asarray(layout.joints)])
        return ok

    def sample_uniform(self, key: jax.Array, n: int, dtype=float) -> jax.Array:
        """(n, M) samples uniform in the bounds box (needs finite bounds).

        A sample's inertia need not be consistent; `from_unconstrained(to_unconstrained(.))`
        projects DiffNEA blocks onto the consistent set.

        Raises:
          ValueError: naming the parameters with an infinite bound.
        """
        unbounded = [name for name, lo, hi in
                     zip(self.names, self.lower_bounds, self.upper_bounds)
                     if not (np.isfinite(lo) and np.isfinite(hi))]
        if unbounded:
            raise ValueError('sample_uniform needs finite bounds; unbounded: '
                             + ', '.join(unbounded))
        u = jax.random.uniform(key, (n, self.num_params), dtype=dtype)
        lower, upper = self.lower.astype(u.dtype), self.upper.astype(u.dtype)
        return lower + (upper - lower) * u


def _as_float(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ValueError(f'{what}: expected a number, got {value!r}')
    value = float(value)
    if np.isnan(value):
        raise ValueError(f'{what}: expected a number, got nan')
    return value


def make_parameter_spec(model: RobotModel,
                        entries: Mapping[str, tuple[float, float]]
                        | Iterable[tuple[str, tuple[float, float]]],
                        init: Mapping[str, float] | None = None,
                        payload: Payload | None = None) -> ParameterSpec:
    """Build and validate a `ParameterSpec` for `model`.

    Args:
      model: the robot; links and joints are referred to by `model.link_names` /
        `model.joint_names` (body i is moved by joint i).
      entries: name -> (lower, upper) bounds in physical units (+-inf allowed), in the order
        of `theta`; a mapping or an iterable of pairs.
      init: optional name -> initial value, within the bounds.
      payload: the payload that `payload.<attribute>` parameters name, if any.

    Returns:
      ParameterSpec.

    Raises:
      ValueError: naming the offending key, for an unknown link, joint or attribute (listing
        the valid ones), a duplicate, bounds that are not numbers or with lower >= upper, a
        negative lower bound of a non-negative quantity, an initial value out of bounds
        or not in `entries`, a payload parameter without a payload (or with a link of that
        name), or a payload on a body the model does not have.
    """
    items = list(entries.items()) if isinstance(entries, Mapping) else list(entries)
    if payload is not None:
        if not 0 <= payload.body < model.num_bodies:
            raise ValueError(f'payload: body {payload.body} is not a body of model '
                             f'{model.name!r} ({model.num_bodies} bodies)')
        if PAYLOAD in model.link_names:
            raise ValueError(f"{PAYLOAD}: the model has a link of that name; a payload's "
                             'parameters would be ambiguous')
    init = dict(init or {})
    names, bodies, attributes, lowers, uppers = [], [], [], [], []
    for item in items:
        name, bounds = item
        if not isinstance(name, str):
            raise ValueError(f'parameter name must be a string, got {name!r}')
        if name in names:
            raise ValueError(f'{name}: duplicate parameter')
        obj, attribute = split_name(name)
        if obj == PAYLOAD and PAYLOAD not in model.link_names:
            if payload is None:
                raise ValueError(f'{name}: no payload is configured (model.payload)')
            if attribute not in PAYLOAD_ATTRIBUTES:
                raise ValueError(f'{name}: a payload has the attributes '
                                 f'{", ".join(PAYLOAD_ATTRIBUTES)}')
            body = _PAYLOAD_BODY
        elif attribute in LINK_ATTRIBUTES:
            if obj not in model.link_names:
                raise ValueError(f'{name}: unknown link {obj!r} of model {model.name!r}; '
                                 f'valid links: {", ".join(model.link_names)}')
            body = model.link_names.index(obj)
        else:
            if obj not in model.joint_names:
                raise ValueError(f'{name}: unknown joint {obj!r} of model {model.name!r}; '
                                 f'valid joints: {", ".join(model.joint_names)}')
            body = model.joint_names.index(obj)
        try:
            lo, hi = bounds
        except (TypeError, ValueError):
            raise ValueError(f'{name}: expected bounds (lower, upper), got {bounds!r}') from None
        lo, hi = _as_float(lo, f'{name}: lower bound'), _as_float(hi, f'{name}: upper bound')
        if not lo < hi:
            raise ValueError(f'{name}: expected lower < upper, got ({lo}, {hi})')
        if attribute in NONNEGATIVE_ATTRIBUTES and lo < 0.0:
            raise ValueError(f'{name}: {attribute} cannot be negative; expected lower >= 0, '
                             f'got {lo}')
        names.append(name)
        bodies.append(body)
        attributes.append(attribute)
        lowers.append(lo)
        uppers.append(hi)
    unknown = sorted(set(init) - set(names))
    if unknown:
        raise ValueError(f'{unknown[0]}: initial value given for a parameter that is not free; '
                         f'free: {", ".join(names)}')
    init_values = ()
    if init:
        values = []
        for name, lo, hi in zip(names, lowers, uppers):
            value = init.get(name)
            if value is not None:
                value = _as_float(value, f'{name}: initial value')
                if not lo <= value <= hi:
                    raise ValueError(f'{name}: initial value {value} outside [{lo}, {hi}]')
            values.append(value)
        init_values = tuple(values)
    return ParameterSpec(names=tuple(names), bodies=tuple(bodies), attributes=tuple(attributes),
                         lower_bounds=tuple(lowers), upper_bounds=tuple(uppers),
                         init_values=init_values, payload=payload)
