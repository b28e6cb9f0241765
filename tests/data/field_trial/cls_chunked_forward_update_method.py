# kind: zero-grad-in-group
# expect: line 32 -- the reset after each chunk's backward wipes the chunks before it, so update() applies only the last chunk (weighted by its fraction)
# framework: accelerate (no accumulate(); chunks of one batch)
# pattern: trainer class: forward() splits the batch into chunks, weights each chunk loss by its size fraction and backpropagates it; update() (a separate method the caller invokes after forward) clips, steps and resets
from accelerate import Accelerator


def split_chunks(batch, max_batch_size):
    n = len(batch)
    for i in range(0, n, max_batch_size):
        part = batch[i : i + max_batch_size]
        yield len(part) / n, part


class DiffusionTrainer:
    def __init__(self, model, optimizer, max_grad_norm=1.0):
        self.accelerator = Accelerator()
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.max_grad_norm = max_grad_norm

    def update(self):
        self.accelerator.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad()

    def forward(self, batch, max_batch_size=None):
        total = 0.0
        for frac, part in split_chunks(batch, max_batch_size or len(batch)):
            loss = self.model(part) * frac
            total += loss.item()
            self.accelerator.backward(loss)
            self.optimizer.zero_grad()
        return total


def train(trainer, loader, steps):
    for _ in range(steps):
        trainer.forward(next(loader), max_batch_size=4)
        trainer.update()
