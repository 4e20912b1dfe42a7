"""Explicit CUDA graphs in PyTorch: a whole training step captured with torch.cuda.graph.

    cuda_graph_train.py [--replays 12]

An MLP (4096 -> 4096 x 4 -> 1024, batch 1024) with Adam(capturable=True): three warm-up
steps on a side stream, then forward, backward and optimizer step are captured into one
graph, which is replayed with new data copied into the static input each time. Then
torch.cuda.make_graphed_callables graphs a second small network's forward and backward,
trained eagerly around them. Saves both losses, the output of the last replay and the
weights' checksums.
"""

import argparse

import common


def mlp(torch, widths):
    layers = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(torch.nn.GELU())
    return torch.nn.Sequential(*layers)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--replays", type=int, default=12)
    a = p.parse_args()

    torch = common.torch_setup()
    dev = common.device()
    gpu = common.on_gpu()
    width, batch, out_dim = common.pick((4096, 1024, 1024), (64, 8, 16))
    g = common.cpu_generator(torch)
    data = torch.randn(a.replays, batch, width, generator=g)
    target = torch.randn(a.replays, batch, out_dim, generator=g)

    # 1. Whole-step capture.
    torch.manual_seed(common.SEED)
    model = mlp(torch, [width, width, width, width, width, out_dim]).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, capturable=gpu)
    static_x = torch.zeros(batch, width, device=dev)
    static_y = torch.zeros(batch, out_dim, device=dev)

    def train_step():
        opt.zero_grad(set_to_none=True)
        out = model(static_x)
        loss = torch.nn.functional.mse_loss(out, static_y)
        loss.backward()
        opt.step()
        return out, loss

    static_x.copy_(data[0])
    static_y.copy_(target[0])
    if gpu:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                train_step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_out, static_loss = train_step()
        common.kv("cuda_graph", "captured")
    losses = []
    for i in range(a.replays):
        static_x.copy_(data[i])
        static_y.copy_(target[i])
        if gpu:
            graph.replay()
            out, loss = static_out, static_loss
        else:
            out, loss = train_step()
        losses.append(loss.item())
    common.kv("graph_loss_last", f"{losses[-1]:.6f}")

    # 2. make_graphed_callables on part of a network.
    torch.manual_seed(common.SEED + 1)
    head = mlp(torch, [width, 1024, 1024]).to(dev)
    tail = mlp(torch, [1024, 1024, out_dim]).to(dev)
    opt2 = torch.optim.SGD(list(head.parameters()) + list(tail.parameters()), lr=0.01)
    if gpu:
        sample = torch.randn(batch, width, device=dev, requires_grad=False)
        head = torch.cuda.make_graphed_callables(head, (sample,))
    losses2 = []
    for i in range(a.replays):
        x = data[i].to(dev)
        loss = torch.nn.functional.mse_loss(tail(head(x)), target[i].to(dev))
        opt2.zero_grad(set_to_none=True)
        loss.backward()
        opt2.step()
        losses2.append(loss.item())
    common.kv("graphed_callables_loss_last", f"{losses2[-1]:.6f}")

    common.save(
        {
            "losses": losses,
            "last_out": out,
            "checksum": sum(p.detach().double().sum() for p in model.parameters()),
            "losses2": losses2,
            "checksum2": sum(p.detach().double().sum() for p in tail.parameters()),
        }
    )
    common.finish(torch)


if __name__ == "__main__":
    main()
