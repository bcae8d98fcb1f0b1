"""The in-memory backend: the reference implementation of the contracts."""
