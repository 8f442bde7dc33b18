"""Excitation design: a motion chosen before recording so that its data fix the configured
parameters.

  * `fourier`: finite Fourier series per joint plus a quintic boundary polynomial, so that a
    trajectory starts and stops at rest (`fourier_trajectory`).
  * `information`: the Fisher information of the free parameters along a motion
    (`fisher_information`), from the command torque through the dynamics and friction
    (`dynamics.control.command_torque`).
  * `limits`: joint limits as a pytree, their normalised use along a trajectory, the smooth
    penalty of the optimiser and the hard check.
  * `design`: the D-optimal objective and its L-BFGS optimisation (`design_trajectory`).
"""
