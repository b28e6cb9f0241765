"""The `accumlint` command line (click): `check`, `rule`, `clean`, `server`, `explain`."""
