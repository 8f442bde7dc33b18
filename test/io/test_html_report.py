"""report.html (io.html_report): content from a synthetic lm fit, and the page in a real
headless browser (Debian's chromium, which .ci/run installs): no console messages, every
parameter with its unit in the rendered DOM, and a screenshot under out/."""

import base64
import os
import pathlib
import re
import shutil
import subprocess

import numpy as np
import pytest

from sysid_ros.io import config as config_io
from sysid_ros.io import diagnosis, html_report, pipeline, results, units
from sysid_ros.io.pipeline import FitResult
from sysid_ros.io.segments import HeldOutRollouts

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
SCREENSHOT = REPO_ROOT / 'out' / 'test_html_report' / 'report.png'
CHROMIUM = shutil.which('chromium') or shutil.which('chromium-browser')
# A console message in chromium's log on stderr: [...:INFO:CONSOLE:12] "text", source: URL (12)
CONSOLE = re.compile(r':CONSOLE[^\]]*\] "(.*)", source: (\S*)')
DATA_PNG = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


@pytest.fixture(scope='module')
def problem():
    return pipeline.build_problem(config_io.from_dict({
        'model': {'builder': 'double_pendulum', 'joints': ['joint1', 'joint2'],
                  'actuator': 'viscous'},
        'parameters': {
            'link1': {'mass': {'min': 0.1, 'max': 5.0}},
            'link2': {'mass': {'min': 0.1, 'max': 5.0}, 'com': {'x': {'min': -0.2, 'max': 0.2}},
                      'inertia': {'iyy': {'min': 0.0, 'max': 0.5}}},
            'joint1': {'damping': {'min': 0.0, 'max': 1.0}},
        }}))


def _lm_result(problem, warnings=()):
    """An lm-like result: one restart, a Laplace covariance, an identifiability report."""
    rng = np.random.default_rng(0)
    truth = np.array([1.0, 1.0, 0.01, 0.08, 0.15])
    root = rng.normal(size=(5, 5)) * 1e-3
    covariance = root @ root.T + np.diag([1e-6, 1e-6, 1e-8, 1e-6, 1e-6])
    hessian = np.linalg.inv(covariance)
    info = {'identifiability': diagnosis.identifiability_report(problem, hessian, truth),
            'noise_std': [1e-3] * 4}
    return FitResult(method='lm', names=problem.names, particles=truth[None],
                     initial=1.2 * truth[None], lower=np.asarray(problem.spec.lower_bounds),
                     upper=np.asarray(problem.spec.upper_bounds),
                     loss_history=np.geomspace(100.0, 1.0, 12), iterations=12, final_loss=1.0,
                     wall_time=3.0, consistent=np.array([True]), info=info, best=truth,
                     covariance=covariance, covariance_dof=30.0, converged=not warnings,
                     convergence='tolerance', warnings=tuple(warnings))


def _held(num_particles=1):
    """Six measured segments of 20 steps at 100 Hz and their predictions."""
    rng = np.random.default_rng(1)
    t = 0.01 * np.arange(1, 21)
    real = np.sin(t[None, :, None] + np.arange(6)[:, None, None] + np.arange(4))
    sim = real + 0.02 * rng.normal(size=(num_particles,) + real.shape)
    return HeldOutRollouts(t, real, sim, np.ones(4), 1)


def _chromium(*args, timeout=120):
    """Run headless chromium; fails in CI (which installs it) and skips elsewhere without it."""
    if CHROMIUM is None:
        message = ("Debian's chromium is not installed (.ci/run installs it: apt-get install "
                   'chromium chromium-driver)')
        if os.environ.get('CI'):
            pytest.fail(message)
        pytest.skip(message)
    return subprocess.run(
        [CHROMIUM, '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic',
         '--no-first-run', '--disable-background-networking', '--disable-component-update',
         '--disable-sync', '--enable-logging=stderr', '--v=0', *args],
        capture_output=True, text=True, timeout=timeout, check=True)


def _console(stderr: str) -> list[tuple[str, str]]:
    """(message, source) of every console message in chromium's log."""
    return CONSOLE.findall(stderr)


@pytest.fixture(scope='module')
def page(problem, tmp_path_factory):
    """report.html of a synthetic lm fit with held-out metrics, written by write_results."""
    out = tmp_path_factory.mktemp('report') / 'fit'
    metrics = {'kl_real_sim': 0.12, 'kl_sim_real': 0.3, 'mmd': 0.004, 'log_likelihood': 512.0,
               'nmse': 1.3e-4, 'num_segments': 6, 'horizon': 20, 'evaluated_on': 'held-out'}
    results.write_results(out, _lm_result(problem, ['lm: loss <b>high</b>']),
                          extra={'config': 'dp.yaml', 'bag': 'runs'}, metrics=metrics,
                          report=html_report.ReportData(units.parameter_units(problem),
                                                        units.state_labels(problem), _held()))
    return out / html_report.REPORT_FILE


def test_the_page_holds_every_section_and_only_embedded_images(problem, page):
    text = page.read_text()
    for name, unit in zip(problem.names, units.parameter_units(problem)):
        assert f'<td class="name">{name}</td><td class="text">{unit}</td>' in text, name
    for section in ('Parameters', 'Identifiability', 'Convergence', 'Measured vs predicted',
                    'Posterior', 'KL(real || sim) [nats]', 'condition number'):
        assert section in text, section
    assert 'NOT converged' in text and 'lm: loss &lt;b&gt;high&lt;/b&gt;' in text   # escaped
    assert 'draws from N(estimate, covariance), the Gaussian approximation' in text
    # Convergence, prediction and corner plot, each a PNG inside the page; nothing fetched.
    images = DATA_PNG.findall(text)
    assert len(images) == 3 and len(re.findall(r'<img ', text)) == 3
    for image in images:
        assert base64.b64decode(image)[:8] == b'\x89PNG\r\n\x1a\n'
    assert not re.search(r'(src|href)="(?!data:)', text) and '<script' not in text


def test_methods_without_covariance_or_analysis(problem):
    names = problem.names
    estimate = {'method': 'csvgd', 'converged': True, 'convergence': 'loss flat',
                'warnings': [], 'diagnostics': {},
                'parameters': {n: {'mean': 1.0, 'std': 0.1, 'min': 0.0, 'max': 2.0,
                                   'initial': 1.0, 'ci95': [0.8, 1.2]} for n in names}}
    particles = np.random.default_rng(3).normal(1.0, 0.1, (32, len(names)))
    text = html_report.render_report(estimate, particles, np.ones(5))
    assert '32 finite posterior particles of csvgd' in text and 'lm does' in text
    assert len(DATA_PNG.findall(text)) == 2                  # convergence and corner plot
    point = dict(estimate, method='nea')
    text = html_report.render_report(point, particles[:1], np.ones(5))
    assert 'nea gives a point estimate without a covariance' in text
    assert len(DATA_PNG.findall(text)) == 1
    with pytest.raises(ValueError, match='units: expected 5'):
        html_report.render_report(estimate, particles, np.ones(5),
                                  data=html_report.ReportData(units=['kg']))


def test_chromium_reports_console_errors(tmp_path):
    """The check below can fail: a page that logs to the console is caught."""
    bad = tmp_path / 'bad.html'
    bad.write_text('<!DOCTYPE html><html><body><script>console.error("broken")</script>'
                   '</body></html>')
    run = _chromium(f'--user-data-dir={tmp_path / "profile"}', '--dump-dom', bad.as_uri())
    assert ('broken', bad.as_uri()) in _console(run.stderr)


def test_the_page_renders_in_chromium_without_console_messages(problem, page, tmp_path):
    profile = f'--user-data-dir={tmp_path / "profile"}'
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    shot = _chromium(profile, f'--screenshot={SCREENSHOT}', '--window-size=1200,3000',
                     page.as_uri())
    assert _console(shot.stderr) == []
    assert SCREENSHOT.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    dom = _chromium(profile, '--dump-dom', page.as_uri())
    assert _console(dom.stderr) == []
    for name, unit in zip(problem.names, units.parameter_units(problem)):
        assert re.search(rf'<td class="name">{re.escape(name)}</td>\s*'
                         rf'<td class="text">{re.escape(unit)}</td>', dom.stdout), name
