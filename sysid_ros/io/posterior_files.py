"""Posterior files of the live session: `<stem>.npz` (`particles` (P, M), `names` (M,),
`lower`, `upper` (M,), `model`: the fingerprint of the model they belong to; where the
session had them, its Laplace summary `laplace_mean` (M,) and `laplace_covariance` (M, M), its
`noise_scale` and the windows' innovations it was read from (`innovation_offsets` (N, M),
`innovation_prior_covariances` and `innovation_window_covariances` (N, M, M),
`sequential_prior.Innovation`), which a resumed session starts from) beside
`<stem>.yaml` (a plain summary), each written to a temporary file in the same folder and
renamed into place, so that a reader never sees half a file, even after a kill mid-write.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import yaml

from sysid_ros.io.trajectory import DataError

__all__ = ['posterior_paths', 'write_atomic', 'write_posterior', 'load_posterior',
           'load_laplace', 'load_innovations', 'resume_refusal', 'INNOVATION_KEYS']

# The npz keys of the innovations' (offsets, prior covariances, window covariances).
INNOVATION_KEYS = ('innovation_offsets', 'innovation_prior_covariances',
                   'innovation_window_covariances')


def posterior_paths(path: str | os.PathLike) -> tuple[str, str]:
    """(`<stem>.npz`, `<stem>.yaml`) of a posterior path given with or without an extension."""
    stem, ext = os.path.splitext(os.fspath(path))
    if ext not in ('.npz', '.yaml'):
        stem = os.fspath(path)
    return stem + '.npz', stem + '.yaml'


def write_atomic(path: str, write) -> None:
    """Call `write(file object)` on a temporary file beside `path`, then rename it to `path`."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix='.' + os.path.basename(path) + '.')
    try:
        with os.fdopen(fd, 'wb') as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)                    # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_posterior(path: str | os.PathLike, names) -> np.ndarray:
    """(P, M) particles of a posterior file, columns in the order of `names` (M,).

    Raises:
      DataError: unreadable file, missing keys, parameters missing or non-finite values
        (naming the file).
    """
    npz, _ = posterior_paths(path)
    try:
        with np.load(npz, allow_pickle=False) as f:
            particles = np.asarray(f['particles'], dtype=float)
            stored = [str(n) for n in f['names']]
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f'{npz}: cannot read a posterior (particles, names): {exc}') from exc
    if particles.ndim != 2 or particles.shape[1] != len(stored) or not len(particles):
        raise DataError(f'{npz}: particles: expected (P, {len(stored)}), got '
                        f'{particles.shape}')
    missing = [n for n in names if n not in stored]
    if missing:
        raise DataError(f'{npz}: names: no parameter {missing[0]!r}; the file has '
                        f'{", ".join(stored)}')
    particles = particles[:, [stored.index(n) for n in names]]
    if not np.all(np.isfinite(particles)):
        raise DataError(f'{npz}: particles: non-finite values')
    return particles


def _order(f, names) -> list[int]:
    """The index in the open npz `f`'s `names` of each of `names`."""
    stored = [str(n) for n in f['names']]
    return [stored.index(n) for n in names]


def load_laplace(path: str | os.PathLike, names) -> tuple[np.ndarray, np.ndarray, float] | None:
    """(mean (M,), covariance (M, M) [physical], noise scale) of a posterior file, in the order
    of `names` (M,; all in the file, as `load_posterior` checks), or None where the file has
    no finite summary."""
    npz, _ = posterior_paths(path)
    with np.load(npz, allow_pickle=False) as f:
        if 'laplace_mean' not in f:
            return None
        order = _order(f, names)
        mean = np.asarray(f['laplace_mean'], dtype=float)[order]
        cov = np.asarray(f['laplace_covariance'], dtype=float)[np.ix_(order, order)]
        scale = float(f['noise_scale'])
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(cov)) and np.isfinite(scale)):
        return None
    return mean, cov, scale


def load_innovations(path: str | os.PathLike, names
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(offsets (N, M), prior covariances (N, M, M), window covariances (N, M, M)) [physical]
    of a posterior file, in the order of `names` (M,), or None where it has none."""
    npz, _ = posterior_paths(path)
    with np.load(npz, allow_pickle=False) as f:
        if INNOVATION_KEYS[0] not in f:
            return None
        order = _order(f, names)
        offsets, prior, window = (np.asarray(f[k], dtype=float) for k in INNOVATION_KEYS)
    pairs = np.ix_(np.arange(len(offsets)), order, order)
    return offsets[:, order], prior[pairs], window[pairs]


def resume_refusal(path: str | os.PathLike, names, model: str) -> str:
    """Why the posterior file `path` cannot be resumed by a session of parameters `names`
    (M,) on the model of fingerprint `model`; '' when it can (the same names, in any order,
    and the same model)."""
    npz, _ = posterior_paths(path)
    try:
        with np.load(npz, allow_pickle=False) as f:
            stored = [str(n) for n in f['names']]
            saved_model = str(f['model']) if 'model' in f else ''
    except (OSError, ValueError, KeyError) as exc:
        return f'{npz}: cannot read it ({exc})'
    if sorted(stored) != sorted(names):
        return (f'{npz} holds other parameters ({", ".join(sorted(set(stored) ^ set(names)))} '
                'differ)')
    if saved_model != model:
        return f'{npz} was saved for another model (fingerprint {saved_model or "none"})'
    return ''


def write_posterior(npz: str, yml: str, theta, names, lower, upper, summary: dict,
                    model: str = '',
                    laplace: tuple[np.ndarray, np.ndarray, float] | None = None,
                    innovations: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
                    ) -> None:
    """Write particles `theta` (P, M) with their `names`, `lower` and `upper` (M,) bounds, the
    `model` fingerprint, the session's `laplace` (mean (M,), covariance (M, M), noise
    scale; None: none) and `innovations` (offsets (N, M), prior and window covariances
    (N, M, M); None: none) to `npz`, and the plain `summary` to `yml`, each atomically
    (`write_atomic`)."""
    extra = {} if laplace is None else {'laplace_mean': laplace[0],
                                        'laplace_covariance': laplace[1],
                                        'noise_scale': np.array(laplace[2])}
    if innovations is not None:
        extra.update(zip(INNOVATION_KEYS, innovations))
    write_atomic(npz, lambda f: np.savez(f, particles=theta, names=np.array(names),
                                         lower=lower, upper=upper, model=np.array(model),
                                         **extra))
    text = yaml.safe_dump(summary, sort_keys=False).encode('utf-8')
    write_atomic(yml, lambda f: f.write(text))
