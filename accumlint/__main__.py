"""`python -m accumlint` runs the command-line interface."""

from accumlint.cli.app import main

if __name__ == "__main__":
    main()
