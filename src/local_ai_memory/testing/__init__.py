"""Conformance suites any storage backend can run (requires pytest).

Subclass a suite in your own test module and give it a ``backend`` fixture that returns a
fresh backend; every test of the suite then runs against it.
"""
