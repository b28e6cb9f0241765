"""ACC105 bad: a loss function handed to the HF Trainer as `compute_loss_func=` that ignores
`num_items_in_batch`.

With `compute_loss_func` set, the Trainer (transformers 5.24.0 `training_step`) takes the
returned loss as already normalized for the whole group and does not divide it by A = 4.
This function returns each microbatch's token *mean*, so each update applies the sum of 4
microbatch-mean gradients, 4 times the intended gradient. Runs on CPU when `transformers`
is installed (not a dependency of the test environment: there the catalogue only parses it).
"""
import tempfile

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3
EPOCHS = 2
SEQ_LEN = 32  # padded sequence length
VOCAB = 10


def make_dataset():
    n = GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE
    first = torch.randint(0, VOCAB, (n, 1))
    input_ids = (first + torch.arange(SEQ_LEN)) % VOCAB  # each token follows its predecessor
    lengths = torch.randint(2, SEQ_LEN + 1, (n,))
    attention_mask = (torch.arange(SEQ_LEN) < lengths[:, None]).long()
    labels = input_ids.masked_fill(attention_mask == 0, -100)  # padding: not supervised
    return [{"input_ids": input_ids[k], "attention_mask": attention_mask[k], "labels": labels[k]} for k in range(n)]


def smoothed_loss(outputs, labels, num_items_in_batch=None):  # expect: ACC105
    logits = outputs.logits[:, :-1, :]  # position t predicts token t + 1
    return F.cross_entropy(logits.reshape(-1, VOCAB), labels[:, 1:].reshape(-1), ignore_index=-100,
                           label_smoothing=0.1)


def main():
    torch.manual_seed(0)
    dataset = make_dataset()
    model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=SEQ_LEN, n_embd=16, n_layer=1, n_head=2,
                                       bos_token_id=0, eos_token_id=0))
    with tempfile.TemporaryDirectory() as output_dir:
        args = TrainingArguments(
            output_dir=output_dir,
            per_device_train_batch_size=MICROBATCH_SIZE,
            gradient_accumulation_steps=ACCUMULATION_STEPS,
            num_train_epochs=EPOCHS,
            learning_rate=1e-3,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            use_cpu=True,
            seed=0,
            disable_tqdm=True,
        )
        trainer = Trainer(model=model, args=args, train_dataset=dataset, compute_loss_func=smoothed_loss)
        trainer.train()
    grad_norms = [round(entry["grad_norm"], 3) for entry in trainer.state.log_history if "grad_norm" in entry]
    print(f"optimizer updates: {trainer.state.global_step}, grad norms: {grad_norms}")


if __name__ == "__main__":
    main()
