"""Precision on real code: the corpus, the shared cases and the reduced field trials."""
