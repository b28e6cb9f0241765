"""Two optimizers reset before every backward: each update keeps only the group's last
microbatch (ACC001)."""
import torch

STEPS_PER_UPDATE = 8

encoder = torch.nn.Linear(16, 16)
head = torch.nn.Linear(16, 2)
enc_opt = torch.optim.SGD(encoder.parameters(), lr=0.1)
head_opt = torch.optim.SGD(head.parameters(), lr=0.1)


def epoch(loader):
    for n, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(head(encoder(x)), y) / STEPS_PER_UPDATE
        enc_opt.zero_grad()
        head_opt.zero_grad()
        loss.backward()
        if (n + 1) % STEPS_PER_UPDATE == 0:
            enc_opt.step()
            head_opt.step()
