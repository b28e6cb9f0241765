"""The rule catalogue and the spec: rule folders, scripts, registry, scaffold, --rule."""
