# expect: nothing -- update_params counts the microbatches against accumulative_counts
from mmengine.model import BaseModel


class Net(BaseModel):
    def forward(self, inputs, data_samples=None, mode="tensor"):
        return self.head(inputs)

    def train_step(self, data, optim_wrapper):
        with optim_wrapper.optim_context(self):
            data = self.data_preprocessor(data, True)
            losses = self._run_forward(data, mode="loss")
        loss, log_vars = self.parse_losses(losses)
        optim_wrapper.update_params(loss)
        return log_vars
