"""How well parameters explain data: the output-error likelihood over single- or
multiple-shooting windows (`likelihood`, `shooting_windows`, `profiled_start`), the
equation-error likelihood (`equation_error`), DiffNEA's rollout and one-step losses
(`losses`), and trajectory metrics (`metrics`: KNN KL, MMD, predictive log-likelihood, NMSE)."""
