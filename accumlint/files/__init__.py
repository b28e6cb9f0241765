"""Files accumlint reads and writes: regular files only, bounded reads, the safe writer, text edits."""
