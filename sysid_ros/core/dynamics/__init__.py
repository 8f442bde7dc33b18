"""Motion of a model: kinematics, rigid-body algorithms (RNEA, ABA, CRBA, regressor in
`rigid_body`), actuator and friction models (`actuators`, `networks`), integrators (explicit
and variational), observation models (`observations`: joint states, motion capture) and
joint-space control through the model (`control`)."""
