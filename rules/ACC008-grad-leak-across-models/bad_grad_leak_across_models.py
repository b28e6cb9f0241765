"""ACC008 bad: a GAN with accumulation; the generator's loss is backpropagated through the
discriminator, whose gradients are reset only at the group boundary.

The discriminator's update then applies its own loss's gradient plus the generator loss's
gradient with respect to the discriminator (which pushes it to call fakes real). Plain
PyTorch, runs on CPU; it prints how much of the discriminator's first update is stray.
"""
import torch
from torch import nn

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS = 3
NOISE = 4


def main():
    torch.manual_seed(0)
    net_g = nn.Sequential(nn.Linear(NOISE, 16), nn.ReLU(), nn.Linear(16, 2))
    net_d = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 1))
    opt_g = torch.optim.Adam(net_g.parameters(), lr=2e-4)
    opt_d = torch.optim.Adam(net_d.parameters(), lr=2e-4)
    bce = nn.BCEWithLogitsLoss()
    ones, zeros = torch.ones(MICROBATCH_SIZE, 1), torch.zeros(MICROBATCH_SIZE, 1)
    own = torch.zeros(())  # norm of the discriminator's own accumulated gradient, first group
    for i in range(GROUPS * ACCUMULATION_STEPS):
        real = torch.randn(MICROBATCH_SIZE, 2) + 3.0
        fake = net_g(torch.randn(MICROBATCH_SIZE, NOISE))
        d_loss = (bce(net_d(real), ones) + bce(net_d(fake.detach()), zeros)) / ACCUMULATION_STEPS
        d_loss.backward()
        if i == ACCUMULATION_STEPS - 1:
            own = torch.cat([p.grad.flatten() for p in net_d.parameters()]).clone()
        g_loss = bce(net_d(fake), ones) / ACCUMULATION_STEPS
        g_loss.backward()  # expect: ACC008
        if (i + 1) % ACCUMULATION_STEPS == 0:
            applied = torch.cat([p.grad.flatten() for p in net_d.parameters()])
            if i == ACCUMULATION_STEPS - 1:
                stray = (applied - own).norm() / applied.norm()
                print(f"first discriminator update: {stray:.0%} of the applied gradient's norm is the generator's loss")
            opt_d.step()
            opt_g.step()
            opt_d.zero_grad()
            opt_g.zero_grad()


if __name__ == "__main__":
    main()
