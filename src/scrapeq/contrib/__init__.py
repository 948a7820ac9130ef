"""Integrations with other tools, each an optional extra. Nothing in the package imports them."""
