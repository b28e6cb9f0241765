"""What a run prints: the output formats and the rule catalogue as the CLI and formats show it."""
