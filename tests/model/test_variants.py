"""Further members of the case families (written for these tests): the same bug in the
other shapes real code takes, and the correct shapes next to them. Plain bad/good snippets of
one rule live in its folder (``rules/<CODE>-<name>/cases.toml``, run by test_rule_folders.py)."""

# The tests kept here need more than one snippet's findings: twins made from one snippet by
# str.replace / str.format. A plain "this one-file snippet reports exactly these (code, line)
# findings" test belongs in the rule's rules/<CODE>-<name>/cases.toml (tests/catalogue/test_rule_folders.py
# runs them all).

from __future__ import annotations

from tests.support import lint


def test_no_sync_around_the_backward_of_a_loss_received_as_argument() -> None:
    """colossalai's wrapper shape: `backward(self, loss)` enters no_sync around the backward
    of a loss whose forward ran in the caller."""
    src = """
    from torch.nn.parallel import DistributedDataParallel

    class Accumulating:
        def backward(self, loss):
            self.count += 1
            with self.model.no_sync():
                scaled = loss / self.size
                scaled.backward()
    """
    assert lint(src) == [("ACC401", 9)]
    # an FSDP import makes the wrapper unknown: FSDP reads its flag at backward time
    assert lint(src.replace("import DistributedDataParallel",
                            "import DistributedDataParallel\n    from torch.distributed.fsdp import fully_shard")) == []
    # a forward inside the same context is fine
    forward_inside = src.replace("scaled = loss / self.size", "loss = self.model(loss)\n                scaled = loss")
    assert lint(forward_inside) == []


def test_losses_kept_for_one_backward_at_the_boundary() -> None:
    """All A graphs alive at once: the big-batch memory that accumulation exists to avoid."""
    src = """
    for epoch in range(epochs):
        group_losses = []
        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y)
            group_losses.append(loss)
            if (i + 1) % A == 0:
                (sum(group_losses) / A).backward()
                optimizer.step()
                optimizer.zero_grad()
                group_losses = []
    """
    assert lint(src) == [("ACC201", 6)]
    assert lint(src.replace("group_losses.append(loss)", "group_losses.append(loss.detach())")) == []


def test_lightning_training_step_is_the_body_of_a_microbatch_loop() -> None:
    src = """
    import lightning as L

    class M(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            sch = self.lr_schedulers()
            self.manual_backward(self.loss(batch) / 4)
            if (batch_idx + 1) % 4 == 0:
                opt.step()
                opt.zero_grad()
            sch.step()
    """
    assert lint(src) == [("ACC304", 16)]
    gated = src.replace("            sch.step()\n", "")
    gated = gated.replace("opt.zero_grad()", "opt.zero_grad()\n                sch.step()")
    assert lint(gated) == []
    # the same method on a class that is no LightningModule is an ordinary function
    assert lint(src.replace("(L.LightningModule)", "")) == []


def test_scheduler_sized_in_microbatches_on_purpose() -> None:
    """diffusers realfill shape (reduced): horizon and warmup multiplied by A, stepped every
    microbatch: consistent units. Without the factor it is case 011's bug."""
    src = """
    from accelerate import Accelerator
    from transformers import get_scheduler
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    sched = get_scheduler("cosine", optimizer=optimizer,
                          num_warmup_steps=args.warmup * args.gradient_accumulation_steps,
                          num_training_steps=args.max_train_steps * args.gradient_accumulation_steps)
    model, optimizer = accelerator.prepare(model, optimizer)
    for batch in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(batch).loss)
            optimizer.step()
            sched.step()
            optimizer.zero_grad()
    """
    assert lint(src) == []
    unscaled = src.replace(" * args.gradient_accumulation_steps", "")
    assert lint(unscaled) == [("ACC304", 13)]
