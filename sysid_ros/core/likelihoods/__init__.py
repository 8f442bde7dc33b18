"""How well parameters explain data: the single- and multiple-shooting likelihoods
(`likelihood`), DiffNEA's rollout and one-step losses (`losses`), and the seed's trajectory
metrics (`metrics`: KNN KL, MMD, DTW)."""
