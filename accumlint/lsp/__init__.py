"""The language server (``accumlint server``); needs the ``lsp`` extra (pygls)."""
