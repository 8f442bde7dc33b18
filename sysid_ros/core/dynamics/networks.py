"""A small multilayer perceptron in plain JAX, for the neural actuator models.

The weights are a tuple of `(W, b)` pairs, `W: (n_in, n_out)` and `b: (n_out,)`, so they sit in
`Params.network` as ordinary pytree leaves: they are differentiated, vmapped over particles and
updated with `dataclasses.replace` like every other parameter. No flax, no module state.
"""

import functools
import math

import jax
import jax.numpy as jnp


def init_mlp(key, sizes, out_scale=1.0, out_bias=0.0, dtype=jnp.float64):
    """Random weights of an MLP with layer widths `sizes = (n_in, h_1, ..., n_out)`.

    Hidden weights are LeCun-normal (variance 1 / fan_in, which keeps tanh units in their
    linear range); biases start at zero. The output layer is scaled by `out_scale` and its bias
    set to `out_bias`, so a model can start close to a chosen output.

    Args:
      key: PRNG key.
      sizes: layer widths, input first, at least two entries.
      out_scale: factor on the output layer's weights.
      out_bias: scalar or (n_out,) initial output bias.
      dtype: float dtype of the weights.

    Returns:
      Tuple of `(W, b)` pairs, one per layer.
    """
    sizes = tuple(int(s) for s in sizes)
    if len(sizes) < 2:
        raise ValueError(f'init_mlp: expected at least input and output sizes, got {sizes}')
    return _init_mlp(key, sizes, out_scale, out_bias, dtype)


@functools.partial(jax.jit, static_argnums=(1, 4))
def _init_mlp(key, sizes, out_scale, out_bias, dtype):
    """`init_mlp` as one compiled program (op-by-op it costs a compilation per layer shape)."""
    keys = jax.random.split(key, len(sizes) - 1)
    layers = []
    for k, n_in, n_out in zip(keys, sizes[:-1], sizes[1:]):
        W = jax.random.normal(k, (n_in, n_out), dtype) / math.sqrt(n_in)
        layers.append((W, jnp.zeros((n_out,), dtype)))
    W, b = layers[-1]
    layers[-1] = (out_scale * W, b + jnp.asarray(out_bias, dtype))
    return tuple(layers)


def mlp(weights, x, activation=jnp.tanh):
    """Apply the MLP `weights` to one input `x` (n_in,) -> (n_out,); linear output layer.

    The default tanh activation is smooth, so dynamics that contain the network stay smooth
    ODEs that integrators of any order can step.
    """
    for W, b in weights[:-1]:
        x = activation(x @ W + b)
    W, b = weights[-1]
    return x @ W + b
