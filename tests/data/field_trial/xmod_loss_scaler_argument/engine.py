# kind: zero-grad-in-group
# expect: line 19 -- the reset after the scaler call runs on every microbatch, so each update (inside the scaler helper, gated by update_grad) applies only the last microbatch
# framework: plain-torch (torch.amp)
# pattern: the scaler object is a PARAMETER of the epoch function; its class lives in amp_utils.py and is constructed in main.py, which passes it in (MAE/ConvNeXt-V2 pretrain shape)
import torch


def train_one_epoch(model, loader, optimizer, epoch, loss_scaler, accum_iter):
    model.train()
    optimizer.zero_grad()
    for it, (images, _) in enumerate(loader):
        with torch.cuda.amp.autocast():
            loss = model(images)
        loss = loss / accum_iter
        loss_scaler(loss, optimizer, parameters=model.parameters(),
                    update_grad=(it + 1) % accum_iter == 0)
        if (it + 1) % accum_iter == 0:
            optimizer.zero_grad()
        optimizer.zero_grad()
