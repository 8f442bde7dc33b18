"""Box-bounded Levenberg-Marquardt with free block starts (`inference.kernels.lm`) on
problems whose answers are known in closed form."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sysid_ros.core.inference.base import KernelData
from sysid_ros.core.inference.kernels import lm

K, N, M, S = 6, 5, 3, 2


def _linear_problem(seed=0):
    """Residual blocks r_k = A_k theta + B_k s_k - y_k (linear: Gauss-Newton is exact)."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(K, N, M))
    b = rng.normal(size=(K, N, S))
    y = rng.normal(size=(K, N))

    def blocks(theta, starts, data):
        return jnp.einsum('knm,m->kn', a, theta) + jnp.einsum('kns,ks->kn', b, starts) - y

    full = np.zeros((K * N, M + K * S))
    for k in range(K):
        full[k * N:(k + 1) * N, :M] = a[k]
        full[k * N:(k + 1) * N, M + k * S:M + (k + 1) * S] = b[k]
    return blocks, full, y.reshape(-1)


def _run(kernel, state, steps=30):
    step = jax.jit(lambda s: kernel.step(s, KernelData(None)))
    for _ in range(steps):
        state, _ = step(state)
    return state


def test_unbounded_solution_is_the_joint_least_squares_solution():
    blocks, full, y = _linear_problem()
    kernel = lm.build_kernel(blocks, -np.inf * np.ones(M), np.inf * np.ones(M))
    state = _run(kernel, kernel.init(None, (jnp.zeros(M), jnp.zeros((K, S))), KernelData(None)))
    solution = np.linalg.lstsq(full, y, rcond=None)[0]
    np.testing.assert_allclose(state.theta, solution[:M], atol=1e-9)
    np.testing.assert_allclose(state.starts.reshape(-1), solution[M:], atol=1e-9)
    assert bool(state.converged)
    start = (jnp.zeros(M), jnp.zeros((K, S)))
    ran = jax.jit(lambda: lm.run(kernel, start, KernelData(None), 30))()
    assert bool(ran.converged)                                   # stopped there, in one loop
    np.testing.assert_allclose(ran.theta, solution[:M], atol=1e-9)


def test_bounds_hold_and_match_scipy_bounded_least_squares():
    from scipy.optimize import lsq_linear
    blocks, full, y = _linear_problem(1)
    solution = np.linalg.lstsq(full, y, rcond=None)[0]
    lower = np.full(M, -np.inf)
    upper = np.full(M, np.inf)
    upper[0] = solution[0] - 0.5                     # the free optimum is outside: active
    kernel = lm.build_kernel(blocks, lower, upper)
    start = kernel.init(None, (jnp.zeros(M), jnp.zeros((K, S))), KernelData(None))
    state = _run(kernel, start, 60)
    reference = lsq_linear(full, y, bounds=(np.concatenate([lower, np.full(K * S, -np.inf)]),
                                            np.concatenate([upper, np.full(K * S, np.inf)])),
                           tol=1e-12).x
    assert float(state.theta[0]) <= upper[0]
    np.testing.assert_allclose(state.theta, reference[:M], atol=1e-7)


def test_schur_hessian_is_the_profiled_one():
    """With the starts eliminated, C^-1 is the theta block of the full inverse Hessian."""
    blocks, full, y = _linear_problem(2)
    theta, starts = jnp.asarray([0.3, -0.2, 0.1]), jnp.zeros((K, S))
    lin = lm.linearize(blocks, theta, starts, None)
    np.testing.assert_allclose(np.linalg.inv(lm.schur_hessian(lin)),
                               np.linalg.inv(full.T @ full)[:M, :M], rtol=1e-9)
    # The posterior's Laplace covariance under unit-variance residuals is that block too.
    np.testing.assert_allclose(lm.posterior_covariance(lin),
                               np.linalg.inv(full.T @ full)[:M, :M], rtol=1e-9)


def test_covariance_is_bell_mccaffrey_cr2_of_the_full_design():
    """At the least-squares solution of a linear problem, the profiled covariance equals the
    theta block of CR2 computed on the full design (theta and every block's start columns):
    (X^T X)^-1 sum_k X_k^T (I - H_kk)^-1/2 e_k e_k^T (I - H_kk)^-1/2 X_k (X^T X)^-1."""
    blocks, full, y = _linear_problem(2)
    solution = np.linalg.lstsq(full, y, rcond=None)[0]
    lin = lm.linearize(blocks, jnp.asarray(solution[:M]),
                       jnp.asarray(solution[M:].reshape(K, S)), None)
    np.testing.assert_allclose(lm.laplace_covariance(lin), _dense_cr2(full, y, solution),
                               rtol=1e-7, atol=1e-12)
    assert float(lm.covariance_dof(lin)) == K - 1


def _dense_cr2(full, y, solution, prior=None):
    """The theta block of CR2 on the full design at `solution`, a prior's precision (M, M)
    in the bread and, as one more source of information, in the meat."""
    extra = np.zeros((full.shape[1],) * 2)
    if prior is not None:
        extra[:M, :M] = prior
    inverse = np.linalg.inv(full.T @ full + extra)
    e = full @ solution - y
    meat = extra.copy()
    for k in range(K):
        x_k, e_k = full[k * N:(k + 1) * N], e[k * N:(k + 1) * N]
        w, v = np.linalg.eigh(np.eye(N) - x_k @ inverse @ x_k.T)
        score = x_k.T @ (v * np.maximum(w, 1e-6) ** -0.5) @ v.T @ e_k
        meat += np.outer(score, score)
    return (inverse @ meat @ inverse)[:M, :M]


def test_prior_pulls_towards_its_mean():
    blocks, full, y = _linear_problem(3)
    mean = jnp.asarray([5.0, 5.0, 5.0])
    big = (mean, 1e8 * jnp.eye(M))
    kernel = lm.build_kernel(blocks, np.full(M, -np.inf), np.full(M, np.inf))
    state = kernel.init(None, (jnp.zeros(M), jnp.zeros((K, S))), KernelData(None, big))
    step = jax.jit(lambda s: kernel.step(s, KernelData(None, big)))
    for _ in range(30):
        state, _ = step(state)
    np.testing.assert_allclose(state.theta, mean, atol=1e-4)


def test_identifiability_names_the_direction_the_data_cannot_see():
    # theta_0 and theta_1 enter only through their sum.
    a = np.array([[1.0, 1.0, 0.0], [2.0, 2.0, 1.0], [0.0, 0.0, 3.0]])
    hessian = a.T @ a
    ident = lm.identifiability(jnp.asarray(hessian), 2.0 * jnp.ones(3))    # bounds [-1, 1]
    assert np.isinf(float(ident.condition_number)) or float(ident.condition_number) > 1e12
    weakest = np.abs(np.asarray(ident.directions[-1]))
    np.testing.assert_allclose(weakest, [2 ** -0.5, 2 ** -0.5, 0.0], atol=1e-8)


def test_a_prior_adds_its_own_information_to_the_covariance():
    """With a prior (mu, Lambda) the covariance is CR2 with Lambda in the bread and, as one
    more independent source of information, in the meat: C^-1 (meat + Lambda) C^-1."""
    blocks, full, y = _linear_problem(4)
    precision = np.diag([4.0, 0.0, 0.0])
    solution = np.linalg.lstsq(full, y, rcond=None)[0]
    lin = lm.linearize(blocks, jnp.asarray(solution[:M]),
                       jnp.asarray(solution[M:].reshape(K, S)), None,
                       (jnp.zeros(M), jnp.asarray(precision)))
    np.testing.assert_allclose(lm.laplace_covariance(lin),
                               _dense_cr2(full, y, solution, precision), rtol=1e-7, atol=1e-12)
    # theta_0 entering no residual: the prior alone determines it, with its own variance.
    lin = lm.linearize(lambda t, s_, d: blocks(t.at[0].set(0.0), s_, d),
                       jnp.asarray(solution[:M]), jnp.asarray(solution[M:].reshape(K, S)),
                       None, (jnp.zeros(M), jnp.asarray(precision)))
    np.testing.assert_allclose(lm.laplace_covariance(lin)[0, 0], 0.25, rtol=1e-9)


def test_directions_the_data_cannot_see_keep_the_prior_variance():
    # theta_0 and theta_1 enter only through their sum, known exactly: with independent
    # priors of variances 1 and 4 on them, their difference keeps what the prior says.
    a = np.array([[1.0, 1.0, 0.0], [2.0, 2.0, 1.0], [0.0, 0.0, 3.0]])
    hessian = jnp.asarray(a.T @ a)
    variance = jnp.asarray([1.0, 4.0, 9.0])
    added = np.asarray(lm.undetermined_covariance(hessian, variance))
    # Prior of (t0, t1) conditioned on t0 + t1: var t0 = 1 - 1 / 5, cov = -(1 * 4) / 5.
    np.testing.assert_allclose(added[:2, :2], [[0.8, -0.8], [-0.8, 0.8]], atol=1e-9)
    np.testing.assert_allclose(added[2], 0.0, atol=1e-9)
    total = added + np.linalg.pinv(a.T @ a)
    assert np.all(np.linalg.eigvalsh(total) > 0.0)                   # every direction has one
    determined = jnp.asarray(np.diag([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(lm.undetermined_covariance(determined, variance), 0.0)
    # The identifiability report's predicted std counts them: the uniform prior of the range.
    ident = lm.identifiability(hessian, 2.0 * jnp.ones(3))
    assert float(ident.predicted_std[0]) > 0.3 * 2.0 / np.sqrt(12.0)


@pytest.mark.parametrize('start', [0.0, 10.0])
def test_nonlinear_fit_converges_from_far(start):
    """r = exp(theta t) - y for a decaying exponential, starts free offsets."""
    t = jnp.linspace(0.0, 1.0, N)
    truth = -1.3

    def blocks(theta, starts, data):
        return jnp.exp(theta[0] * t)[None] + starts[:, :1] - (jnp.exp(truth * t)[None]
                                                              + jnp.arange(K)[:, None] * 0.1)

    kernel = lm.build_kernel(blocks, np.array([-5.0]), np.array([5.0]))
    first = kernel.init(None, (jnp.asarray([start]), jnp.zeros((K, 1))), KernelData(None))
    state = _run(kernel, first, 100)
    np.testing.assert_allclose(state.theta, [truth], atol=1e-8)
    np.testing.assert_allclose(state.starts[:, 0], 0.1 * np.arange(K), atol=1e-8)
