# expect: ACC004 line 15 -- the module's wrapper config accumulates, but train_step steps the wrapper every iteration
from mmengine.model import BaseModel

optim_wrapper = dict(type="OptimWrapper", optimizer=dict(type="SGD", lr=0.01), accumulative_counts=4)


class Net(BaseModel):
    def forward(self, inputs, data_samples=None, mode="tensor"):
        return self.head(inputs)

    def train_step(self, data, optim_wrapper):
        losses = self._run_forward(self.data_preprocessor(data, True), mode="loss")
        loss, log_vars = self.parse_losses(losses)
        optim_wrapper.backward(loss)
        optim_wrapper.step()
        optim_wrapper.zero_grad()
        return log_vars
