"""JAX jit + grad through convolutions and lax.scan.

    jax_conv_scan.py [--steps 5]

A three-layer NHWC convolutional network (lax.conv_general_dilated, 64 channels, 96x96
images, batch 64) feeding a tanh RNN unrolled with lax.scan over 128 steps (width 512),
trained with SGD through `jax.jit(jax.value_and_grad(...))`. Saves the losses, the
last gradients of the first convolution and of the recurrent matrix, and the final
prediction.
"""

import argparse

import jax_common
import common


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    a = p.parse_args()
    jax = jax_common.setup()
    import jax.numpy as jnp
    from jax import lax

    batch, size, ch, seq, hid = common.pick((64, 96, 64, 128, 512), (2, 16, 8, 8, 16))
    key = jax.random.PRNGKey(common.SEED)
    ks = jax.random.split(key, 10)
    params = {
        "c1": jax.random.normal(ks[0], (3, 3, 3, ch)) * 0.2,
        "c2": jax.random.normal(ks[1], (3, 3, ch, ch)) * 0.05,
        "c3": jax.random.normal(ks[2], (3, 3, ch, ch)) * 0.05,
        "proj": jax.random.normal(ks[3], (ch, hid)) * 0.1,
        "wh": jax.random.normal(ks[4], (hid, hid)) / jnp.sqrt(hid),
        "wx": jax.random.normal(ks[5], (hid, hid)) / jnp.sqrt(hid),
        "out": jax.random.normal(ks[6], (hid, 10)) * 0.1,
    }
    images = jax.random.normal(ks[7], (a.steps, batch, size, size, 3))
    seqs = jax.random.normal(ks[8], (a.steps, seq, batch, hid))
    labels = jax.random.randint(ks[9], (a.steps, batch), 0, 10)

    def conv(x, w, stride):
        return lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def model(ps, img, xs):
        h = jax.nn.relu(conv(img, ps["c1"], 1))
        h = jax.nn.relu(conv(h, ps["c2"], 2))
        h = jax.nn.relu(conv(h, ps["c3"], 2))
        state0 = jnp.tanh(h.mean(axis=(1, 2)) @ ps["proj"])

        def cell(state, x):
            state = jnp.tanh(state @ ps["wh"] + x @ ps["wx"])
            return state, state.sum()

        final, trace = lax.scan(cell, state0, xs)
        return final @ ps["out"], trace

    def loss_fn(ps, img, xs, y):
        logits, trace = model(ps, img, xs)
        ce = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))
        return ce + 1e-6 * jnp.mean(trace**2)

    step = jax.jit(jax.value_and_grad(loss_fn))
    losses = []
    for s in range(a.steps):
        loss, grads = step(params, images[s], seqs[s], labels[s])
        params = jax.tree_util.tree_map(lambda p_, g_: p_ - 0.1 * g_, params, grads)
        losses.append(float(loss))
        common.kv(f"loss{s}", f"{losses[-1]:.6f}")
    logits, _ = jax.jit(model)(params, images[0], seqs[0])
    common.save({"losses": losses, "grad_c1": grads["c1"], "grad_wh": grads["wh"], "logits": logits})
    common.finish()


if __name__ == "__main__":
    main()
