"""The runtime engine: levels L0 to L3 of one scope, the session log and L1 compression."""
