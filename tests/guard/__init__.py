"""The runtime guard (slow tier), with its worker scripts and loops."""
