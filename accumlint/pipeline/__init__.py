"""One file through the stages: the byte stage, LibCST, the model, the rules, placed findings."""
