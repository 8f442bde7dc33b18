"""Identification methods behind one contract (`base.Estimator`: init, step, posterior,
rebase): the factories of every method (`methods`), the registry that maps
`estimator.method` to them (`registry`), starting particles (`particles`), and the methods'
own algorithms (`csvgd`, `svgd`, `samplers`, `point_estimators`)."""
