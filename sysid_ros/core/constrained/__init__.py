"""Systems with constraints: holonomic constraints and the flexible loop (`constraints`),
the discrete adjoint of variational rollouts (`adjoint`), planar closed-chain mechanisms
(`mechanisms`) and the ball in a cup (`ball_in_cup`)."""
