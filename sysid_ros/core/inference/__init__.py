"""Identification methods behind one contract (`base.Estimator`: init, step, posterior,
rebase): the factories of every method (`methods`), the registry that maps
`estimator.method` to them (`registry`), starting particles (`particles`), intervals of
particle posteriors (`intervals`), and the methods' own algorithms (`kernels`, one module
each) with what they share: the shooting log density (`shooting`), densities over
unconstrained coordinates (`unconstrained`), physically consistent projection
(`consistency`), optimisers (`optimisers`), sharding (`sharding`), re-seeding
(`reseeding`) and argument checks (`checks`)."""
