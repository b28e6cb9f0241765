# expect: ACC101 line 11 -- the wrapper config sets accumulative_counts, so update_params divides by A again
from mmengine.model import BaseModel

ACCUMULATION_STEPS = 4
optim_wrapper = dict(type="OptimWrapper", optimizer=dict(type="SGD", lr=0.01), accumulative_counts=ACCUMULATION_STEPS)


class Net(BaseModel):
    def train_step(self, data, optim_wrapper):
        losses = self._run_forward(self.data_preprocessor(data, True), mode="loss")
        loss = self.parse_losses(losses)[0] / ACCUMULATION_STEPS
        optim_wrapper.update_params(loss)
        return {"loss": loss}
