# expect: nothing -- a direct step every iteration: A (accumulative_counts) is in the config, not in the code
from mmengine.model import BaseModel


class Net(BaseModel):
    def forward(self, inputs, data_samples=None, mode="tensor"):
        return self.head(inputs)

    def train_step(self, data, optim_wrapper):
        data = self.data_preprocessor(data, True)
        losses = self._run_forward(data, mode="loss")
        loss, log_vars = self.parse_losses(losses)
        optim_wrapper.backward(optim_wrapper.scale_loss(loss))
        optim_wrapper.step()
        optim_wrapper.zero_grad()
        return log_vars
