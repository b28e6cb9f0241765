# entry point of the xmod_loss_scaler_argument case (see engine.py)
import torch

from amp_utils import GradScalerStep
from engine import train_one_epoch


def main(model, loader, args):
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_scaler = GradScalerStep()
    for epoch in range(args.epochs):
        train_one_epoch(model, loader, optimizer, epoch, loss_scaler, args.accum_iter)
