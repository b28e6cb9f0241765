# helper module of the xmod_loss_scaler_argument case (see engine.py)
import torch


class GradScalerStep:
    """Backward through a GradScaler; unscale, clip and update only when `update_grad`."""

    def __init__(self):
        self._scaler = torch.cuda.amp.GradScaler()

    def __call__(self, loss, optimizer, clip_grad=None, parameters=None, update_grad=True):
        self._scaler.scale(loss).backward()
        if update_grad:
            self._scaler.unscale_(optimizer)
            if clip_grad is not None:
                torch.nn.utils.clip_grad_norm_(parameters, clip_grad)
            self._scaler.step(optimizer)
            self._scaler.update()
