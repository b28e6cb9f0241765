"""`# noqa` directives: what they suppress, and the report on the directives themselves."""
