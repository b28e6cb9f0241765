"""Runs, caches and settings: the runner, the caches, discovery, configuration, watch."""
