"""A boundary test on the remainder's truth value: the update runs on every microbatch but the
A-th one (ACC006)."""
import torch


def train(net, data, accumulate=4, epochs=3):
    opt = torch.optim.AdamW(net.parameters(), lr=3e-4)
    for ep in range(epochs):
        for j, (x, y) in enumerate(data):
            seen = ep * len(data) + j
            loss = torch.nn.functional.mse_loss(net(x), y)
            loss.backward()
            if seen % accumulate:
                opt.step()
                opt.zero_grad()
