# model module of the xmod_sft_mask_loss_in_model case (see train.py)
import torch.nn.functional as F
from torch import nn


class TinyGPT(nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx, targets=None, loss_reduction="mean"):
        logits = self.head(self.emb(idx))
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1,
                               reduction=loss_reduction)
