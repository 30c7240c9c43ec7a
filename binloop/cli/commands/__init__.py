"""Sub-commands of the `binloop` CLI."""
