"""The commands beside `check`: `explain`, `--add-noqa`, `--show-settings`, `--watch`."""
