"""Output, suppression and fixes: the CLI, report formats, noqa, fixes, notebooks, pre-commit."""
