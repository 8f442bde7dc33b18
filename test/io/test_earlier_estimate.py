"""An earlier fit's results as a prior: the parameters both name, with the earlier
covariance where the results hold one (the workflow through `sysid fit --prior`:
test/test_cli_workflow.py)."""

import numpy as np
import pytest
import yaml

from sysid_ros.io import earlier_estimate
from sysid_ros.io.errors import InputError

NAMES = ('link2.mass', 'payload.mass', 'joint2.damping')


def _write_results(folder, means, stds, covariance=None):
    folder.mkdir()
    parameters = {n: {'mean': m, 'std': s} for n, m, s in zip(NAMES[::2], means, stds)}
    (folder / 'estimate.yaml').write_text(yaml.safe_dump({'parameters': parameters}))
    if covariance is not None:
        np.savez(folder / 'posterior.npz', names=np.array(NAMES[::2]), covariance=covariance,
                 particles=np.zeros((1, 2)))


def test_the_covariance_block_of_the_shared_names_is_the_prior(tmp_path):
    covariance = np.array([[0.04, 0.01], [0.01, 0.09]])
    _write_results(tmp_path / 'fit', [1.4, 0.06], [0.2, 0.3], covariance)
    earlier = earlier_estimate.read_prior(tmp_path / 'fit', NAMES, np.array([1.0, 0.01, 0.0]))
    assert earlier.source == 'covariance' and earlier.names == ('link2.mass', 'joint2.damping')
    np.testing.assert_allclose(earlier.theta0, [1.4, 0.01, 0.06])
    shared = np.ix_([0, 2], [0, 2])
    np.testing.assert_allclose(earlier.prior.precision[shared], np.linalg.inv(covariance))
    # The payload, new in this fit, is flat.
    assert not np.any(earlier.prior.precision[1]) and not np.any(earlier.prior.precision[:, 1])


def test_without_a_covariance_the_stds_are_the_prior(tmp_path):
    _write_results(tmp_path / 'fit', [1.4, 0.06], [0.2, 0.3])
    earlier = earlier_estimate.read_prior(tmp_path / 'fit' / 'estimate.yaml', NAMES,
                                          np.zeros(3))
    assert earlier.source == 'stds'
    np.testing.assert_allclose(np.diagonal(earlier.prior.precision), [25.0, 0.0, 1.0 / 0.09])


def test_an_estimate_without_any_shared_name_is_refused(tmp_path):
    _write_results(tmp_path / 'fit', [1.4, 0.06], [0.2, 0.3])
    with pytest.raises(InputError, match='at least one of link1.mass'):
        earlier_estimate.read_prior(tmp_path / 'fit', ('link1.mass',), np.zeros(1))
