"""JAX jit + grad: an MLP trained with plain SGD.

    jax_mlp_grad.py [--steps 10]

Four 4096-wide layers (tanh), batch 2048, output 1024, float32, mean squared error;
`jax.jit(jax.value_and_grad(loss))` and a jitted update. Saves the losses, the last
gradient of the first layer (every 16th row), the output on a held-out batch and a
checksum per parameter.
"""

import argparse

import jax_common
import common


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    a = p.parse_args()
    jax = jax_common.setup()
    import jax.numpy as jnp

    width, batch, out_dim = common.pick((4096, 2048, 1024), (64, 16, 8))
    dims = [width] * 5 + [out_dim]
    key = jax.random.PRNGKey(common.SEED)
    params = []
    for i, (m, n) in enumerate(zip(dims, dims[1:])):
        key, k1 = jax.random.split(key)
        params.append((jax.random.normal(k1, (m, n), jnp.float32) / jnp.sqrt(m), jnp.zeros((n,), jnp.float32)))

    def forward(ps, x):
        for i, (w, b) in enumerate(ps):
            x = x @ w + b
            if i < len(ps) - 1:
                x = jnp.tanh(x)
        return x

    def loss_fn(ps, x, y):
        return jnp.mean((forward(ps, x) - y) ** 2)

    grad_fn = jax.jit(jax.value_and_grad(loss_fn))

    @jax.jit
    def update(ps, gs):
        return jax.tree_util.tree_map(lambda p_, g_: p_ - 0.05 * g_, ps, gs)

    key, kx, ky, kt = jax.random.split(key, 4)
    xs = jax.random.normal(kx, (a.steps, batch, width), jnp.float32)
    ys = jax.random.normal(ky, (a.steps, batch, out_dim), jnp.float32)
    losses = []
    for s in range(a.steps):
        loss, grads = grad_fn(params, xs[s], ys[s])
        params = update(params, grads)
        losses.append(float(loss))
        common.kv(f"loss{s}", f"{losses[-1]:.6f}")
    test = jax.random.normal(kt, (batch, width), jnp.float32)
    out = jax.jit(forward)(params, test)
    common.save(
        {
            "losses": losses,
            "grad_w0": grads[0][0][::16],
            "out": out,
            "checksums": [float(jnp.sum(w)) for w, _ in params],
        }
    )
    common.finish()


if __name__ == "__main__":
    main()
