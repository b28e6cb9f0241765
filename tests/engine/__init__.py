"""The engine's stages: prefilters, byte stage, kept blocks, positions, bounds, fuzzing."""
