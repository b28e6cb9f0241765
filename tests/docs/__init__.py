"""The docs and the layout stay true: the README, the release, the import layers."""
