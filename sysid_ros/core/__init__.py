"""Pure-JAX core: model pytrees, dynamics, simulation, likelihoods and estimators."""
