"""One module per method's algorithm, each with a `build_kernel(...) -> base.Kernel` and its
State and Info NamedTuples, all with the signature of `base.Kernel`: `lm`, `nea`, `diffnea`,
`csvgd`, `svgd`, `sgld`, `nuts`, `emcee`, `cem`."""
