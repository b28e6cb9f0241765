# kind: irregular-update-boundary / missing-normalization (silent guard; a linter must NOT flag this file, even with --select ALL)
# expect: nothing -- two optimizers own disjoint parameters: the fast one steps and resets its own parameters every iteration, the slow one steps every second iteration (on odd indices, i.e. the last of each pair) and then the whole model is reset; the forward returns a token sum, so no /A is intended
# framework: plain-torch
# pattern: `if it % 2 == 0: fast.step(); fast.zero_grad() else: for o in opts: o.step(); model.zero_grad()` (a cadence per parameter group, not an inverted gate)


def warm_up(model, loader, fast_opt, slow_opt, iterations):
    for it in range(iterations):
        tokens, targets = next(loader)
        model(tokens, targets).backward()
        if it % 2 == 0:
            fast_opt.step()
            fast_opt.zero_grad(set_to_none=True)
        else:
            for opt in (slow_opt, fast_opt):
                opt.step()
            model.zero_grad(set_to_none=True)
