"""Whole-memory operations over both engines: listing, erasing, exporting and importing."""
