"""Shapes real code uses correctly that the rules once reported (issue 14, precision): each
must stay silent, and the faulty shape next to it must still be reported. Written for these
tests."""

from __future__ import annotations

import pytest

from tests.test_model import lint

# --- ACC201: a count beside the loss holds no graph ----------------------------------------------

def test_a_token_count_weighting_the_loss_is_no_kept_graph() -> None:
    assert lint("""
    import torch.nn.functional as F
    def train(model, optimizer, loader, accum):
        assert len(loader) % accum == 0
        seen = 0
        for i, (ids, labels) in enumerate(loader):
            mask = labels.ne(-100)
            count = mask.long().sum()
            seen += count
            loss = F.cross_entropy(model(ids).flatten(0, 1), labels.flatten(), reduction="sum")
            (loss * count / count).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
                seen = 0
    """, "ALL") == []


def test_a_weight_that_holds_the_graph_is_still_reported() -> None:
    """The factor next to the loss is a model output: adding it up keeps every graph."""
    assert lint("""
    import torch.nn.functional as F
    def train(model, optimizer, loader, accum):
        assert len(loader) % accum == 0
        total_w = 0
        for i, (ids, labels) in enumerate(loader):
            w = model.weight_head(ids).mean()
            total_w += w
            loss = F.cross_entropy(model(ids), labels)
            (loss * w / accum).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
    """) == [("ACC201", 8)]
