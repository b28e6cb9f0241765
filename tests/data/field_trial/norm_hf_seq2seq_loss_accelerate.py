# kind: mean-of-means
# expect: line 30 -- `outputs.loss` of a seq2seq model is a mean over the labels that are not -100 (transcripts of different lengths, padded with -100 by `collate` below), and Accelerate divides it by A: short transcripts weigh as much as long ones
# framework: accelerate (+ a transformers seq2seq model)
# pattern: distillation step in a same-module helper `train_step(batch)` returning `0.8 * outputs.loss + w * kl`; the micro-loop is accumulate() around the helper call
import torch
import torch.nn.functional as F
from accelerate import Accelerator


def collate(features, pad_id):
    labels = torch.nn.utils.rnn.pad_sequence([f["labels"] for f in features], batch_first=True, padding_value=pad_id)
    labels = labels.masked_fill(labels == pad_id, -100)
    feats = torch.stack([f["input_features"] for f in features])
    return {"input_features": feats, "labels": labels}


def main(cfg, student, teacher, optimizer, loader, lr_scheduler):
    accelerator = Accelerator(gradient_accumulation_steps=cfg.accum)
    student, teacher, optimizer, loader, lr_scheduler = accelerator.prepare(student, teacher, optimizer, loader, lr_scheduler)

    def train_step(batch):
        out = student(input_features=batch["input_features"], labels=batch["labels"])
        t_logits = teacher(input_features=batch["input_features"], labels=batch["labels"]).logits.detach()
        kl = F.kl_div(F.log_softmax(out.logits, -1), F.softmax(t_logits, -1), reduction="batchmean")
        return 0.8 * out.loss + cfg.kl_weight * kl

    for batch in loader:
        with accelerator.accumulate(student):
            loss = train_step(batch)
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(student.parameters(), 1.0)
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()
