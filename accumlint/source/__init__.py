"""What a file's bytes and the interpreter's parse say before LibCST: the prefilter, the facts."""
