"""A run over many files: the project pass, the worker pool, the caches, fixes applied and verified."""
