"""Progress of long loops (io.progress): a tqdm bar on a terminal, plain lines elsewhere."""

import io

from sysid_ros.io import progress


class _Terminal(io.StringIO):

    def isatty(self):
        return True


def test_a_terminal_gets_a_tqdm_bar_redrawn_in_place():
    tty = _Terminal()
    with progress.progress_bar('sysid fit [lm]', stream=tty) as report:
        for k in range(1, 5):
            report(k, 4, 1.0 / k, 0.5 * k)
    text = tty.getvalue()
    assert text.startswith('\rsysid fit [lm]') and text.endswith('\n')
    assert '4/4' in text and '100%' in text and 'loss=2.5000e-01' in text
    assert '0/' not in text                     # nothing drawn before the first step


def test_a_log_gets_a_plain_line_every_tenth_and_at_an_early_stop():
    log = io.StringIO()
    with progress.progress_bar('sysid fit [nea]', stream=log) as report:
        # The first step took 30 s (compilation), every later one 0.1 s; stopped at 57/100.
        for k in range(1, 58):
            report(k, 100, 1.0 / k, 30.0 + 0.1 * (k - 1))
    lines = log.getvalue().splitlines()
    assert '\r' not in log.getvalue()
    assert [line.split(':')[1].split()[0] for line in lines] == [
        '1/100', '10/100', '20/100', '30/100', '40/100', '50/100', '57/100']
    assert lines[0] == 'sysid fit [nea]: 1/100 it [elapsed 00:30], loss 1.0000e+00'
    # The ETA leaves out the compilation: 43 steps left at 0.1 s each.
    assert lines[-1] == 'sysid fit [nea]: 57/100 it [elapsed 00:35, ETA 00:04], loss 1.7544e-02'


def test_steps_without_loss_or_time():
    log = io.StringIO()
    with progress.progress_bar('held-out rollouts', unit='particles', stream=log) as report:
        for k in range(1, 4):
            report(k, 3)
    assert log.getvalue().splitlines()[-1].startswith('held-out rollouts: 3/3 particles [')
