# kind: missing-normalization (silent guard; a linter must NOT flag this file, even with --select ALL)
# expect: nothing -- the model's forward returns a token SUM (reduction="sum") and every update sees the same fixed number of tokens, so summing A microbatch sums is the group's sum whatever A is; no /A is intended
# framework: plain-torch (DDP-free; gradients all-reduced by hand with SUM)
# pattern: the reduction lives in another method (forward) of a class in the same file; the micro-loop backpropagates the returned sum undivided
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, tokens, targets):
        logits = self.head(self.emb(tokens))
        return F.cross_entropy(logits.view(targets.numel(), -1), targets.view(-1), reduction="sum")


def train(model, loader, opt, micro_bs, num_updates):
    for update in range(num_updates):
        tokens, targets = next(loader)
        for i in range(len(tokens) // micro_bs):
            sl = slice(i * micro_bs, (i + 1) * micro_bs)
            model(tokens[sl], targets[sl]).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        opt.step()
        model.zero_grad(set_to_none=True)
