"""Shapes real code uses correctly that the rules once reported (issue 14, precision): each
must stay silent, and the faulty shape next to it must still be reported. Written for these
tests."""

from __future__ import annotations

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


# --- an update in both arms of the gate: the `if` picks which update, not when -------------------


def test_engine_step_in_one_arm_only_is_still_gated() -> None:
    assert lint("""
    import deepspeed
    def train(net, loader, cfg):
        model_engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=cfg)
        for i, batch in enumerate(loader):
            model_engine.backward(model_engine(batch).loss)
            if (i + 1) % 4 == 0:
                model_engine.step()
    """) == [("ACC502", 8)]


def test_an_element_of_an_optimizer_list_is_an_optimizer() -> None:
    """`optimizers[0].step()` is an update: reset every microbatch next to it is ACC001."""
    assert lint("""
    for i, b in enumerate(loader):
        optimizers[0].zero_grad()
        (model(b) / accum).backward()
        if (i + 1) % accum == 0:
            optimizers[0].step()
    """) == [("ACC001", 3)]


# --- ACC304: a scheduler told its absolute position ------------------------------------------------

def test_a_position_setter_called_every_microbatch_is_no_fast_schedule() -> None:
    assert lint("""
    def train(model, loader, opt, lr_sched, accum, epoch):
        assert len(loader) % accum == 0
        seen = 0
        for x, y in loader:
            seen += 1
            lr_sched.step(epoch, seen - 1)
            (model(x, y) / accum).backward()
            if seen % accum == 0:
                opt.step()
                opt.zero_grad()
    """) == []


def test_a_scheduler_stepped_without_position_is_still_reported() -> None:
    assert lint("""
    def train(model, loader, opt, lr_sched, accum, epoch):
        assert len(loader) % accum == 0
        for i, (x, y) in enumerate(loader):
            lr_sched.step()
            (model(x, y) / accum).backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
    """) == [("ACC304", 5)]


# --- ACC103: a loss scaled through a context, a division under `if A > 1` ---------------------

def test_loss_scaled_in_a_context_and_divided_conditionally_is_not_missing() -> None:
    assert lint("""
    from apex import amp
    def train(model, opt, loader, grad_accum_steps, fp16):
        assert len(loader) % grad_accum_steps == 0
        for step, batch in enumerate(loader):
            loss = model(batch)
            if grad_accum_steps > 1:
                loss = loss / grad_accum_steps
            if fp16:
                with amp.scale_loss(loss, opt) as scaled_loss:
                    scaled_loss.backward()
            else:
                loss.backward()
            if (step + 1) % grad_accum_steps == 0:
                opt.step()
                opt.zero_grad()
    """, "ALL") == []


def test_an_undivided_loss_in_an_accumulating_loop_is_still_acc103() -> None:
    assert lint("""
    def train(model, opt, loader, grad_accum_steps):
        assert len(loader) % grad_accum_steps == 0
        for step, batch in enumerate(loader):
            loss = model(batch)
            loss.backward()
            if (step + 1) % grad_accum_steps == 0:
                opt.step()
                opt.zero_grad()
    """, "ACC103") == [("ACC103", 6)]


# --- ACC102: fixed-length windows of a packed token stream -----------------------------------------

def test_fixed_length_windows_have_equal_token_counts() -> None:
    assert lint("""
    import torch.nn.functional as F
    def pretrain(model, opt, data, block_size, grad_accum):
        for it in range(10_000):
            chunk = next(data)
            x = chunk[:, :block_size]
            y = chunk[:, 1:block_size + 1]
            logits = model(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1), ignore_index=-1)
            (loss / grad_accum).backward()
            if (it + 1) % grad_accum == 0:
                opt.step()
                opt.zero_grad()
    """) == []


def test_labels_from_a_batch_field_are_still_a_mean_of_means() -> None:
    assert lint("""
    import torch.nn.functional as F
    def pretrain(model, opt, loader, block_size, grad_accum):
        for it, batch in enumerate(loader):
            logits = model(batch["input_ids"][:, :block_size])
            labels = batch["labels"][:, :block_size]
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.reshape(-1), ignore_index=-100)
            (loss / grad_accum).backward()
            if (it + 1) % grad_accum == 0:
                opt.step()
                opt.zero_grad()
    """) == [("ACC102", 8)]


def test_a_manual_engine_boundary_allows_a_gated_step() -> None:
    """`set_gradient_accumulation_boundary(flag)` before each backward: the engine's own counter
    decides nothing, so stepping it only at the boundary is the same as stepping it always."""
    assert lint("""
    import deepspeed
    def train(net, loader, cfg, k):
        engine, *_ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=cfg)
        for i, mb in enumerate(loader):
            last = (i + 1) % k == 0
            engine.set_gradient_accumulation_boundary(last)
            engine.backward(engine(mb).loss)
            if last:
                engine.step()
    """) == []


# --- ACC201: forward-only loops whose losses wait for one backward --------------------------------

def test_losses_kept_for_one_backward_after_a_forward_only_loop() -> None:
    assert lint("""
    def step(net, opt, crit, micro_batches):
        opt.zero_grad()
        kept = {}
        for k, (x, y) in enumerate(micro_batches):
            kept[k] = crit(net(x), y)
        sum(kept.values()).backward()
        opt.step()
    """) == [("ACC201", 6)]


def test_a_running_sum_of_forwards_before_one_backward() -> None:
    assert lint("""
    def step(model, opt, crit, chunks):
        acc = 0
        for x, y in chunks:
            out = model(x)
            acc = acc + crit(out, y)
        (acc / len(chunks)).backward()
        opt.step()
        opt.zero_grad()
    """) == [("ACC201", 6)]


# --- ACC304: a learning rate written by hand from the microbatch counter ------------------------
