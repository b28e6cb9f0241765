# expect: nothing -- undecided: Accelerate divided this backward by A in transformers 4.36-4.45, 5.x sets its A to 1
from transformers import Trainer


class NegatedLossTrainer(Trainer):
    def training_step(self, model, inputs):
        model.train()
        inputs = self._prepare_inputs(inputs)
        with self.compute_loss_context_manager():
            loss = -self.compute_loss(model, inputs)
        self.accelerator.backward(loss)
        return loss.detach() / self.args.gradient_accumulation_steps
