"""ACC503 good: a GAN trainer passes both models it trains to one `accumulate()`; the discriminator
and the generator defer their all-reduce together.

Accelerate in a trainer class, on CPU.
"""
import torch
from accelerate import Accelerator
from torch import nn
from torch.nn import functional as F

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


class GanTrainer:
    def __init__(self, accelerator, generator, discriminator):
        self.accelerator = accelerator
        g_optimizer = torch.optim.Adam(generator.parameters(), lr=2e-4)
        d_optimizer = torch.optim.Adam(discriminator.parameters(), lr=2e-4)
        self.generator, self.discriminator, self.g_optimizer, self.d_optimizer = accelerator.prepare(
            generator, discriminator, g_optimizer, d_optimizer)

    def fit(self, batches):
        for real in batches:
            with self.accelerator.accumulate(self.generator, self.discriminator):
                fake = self.generator(torch.randn(len(real), 8))
                ones, zeros = torch.ones(len(real), 1), torch.zeros(len(real), 1)
                d_loss = (F.binary_cross_entropy_with_logits(self.discriminator(real), ones)
                          + F.binary_cross_entropy_with_logits(self.discriminator(fake.detach()), zeros))
                self.accelerator.backward(d_loss)
                self.d_optimizer.step()
                self.d_optimizer.zero_grad()
                g_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake), ones)
                self.accelerator.backward(g_loss)
                self.g_optimizer.step()
                self.g_optimizer.zero_grad()


def main():
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=ACCUMULATION_STEPS)
    batches = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS, MICROBATCH_SIZE, 4)
    GanTrainer(accelerator, nn.Linear(8, 4), nn.Linear(4, 1)).fit(batches)


if __name__ == "__main__":
    main()
