"""The settings: `[tool.accumlint]`, the hierarchy of config files, which files a run checks."""
