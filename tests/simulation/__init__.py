"""The simulator and the rules that read its traces."""
