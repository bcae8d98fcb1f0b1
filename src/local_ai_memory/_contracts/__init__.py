"""The storage contracts: what the engines need from a backend, and nothing more."""
