# expect: nothing -- two wrapper configs with different accumulative_counts: which one trains is not in view
from mmengine.model import BaseModel

ACCUMULATION_STEPS = 4
small = dict(type="OptimWrapper", optimizer=dict(type="SGD", lr=0.01), accumulative_counts=ACCUMULATION_STEPS)
large = {"type": "AmpOptimWrapper", "optimizer": dict(type="SGD", lr=0.01), "accumulative_counts": 1}


class Net(BaseModel):
    def train_step(self, data, optim_wrapper):
        losses = self._run_forward(self.data_preprocessor(data, True), mode="loss")
        loss = self.parse_losses(losses)[0] / ACCUMULATION_STEPS
        optim_wrapper.update_params(loss)
        return {"loss": loss}
