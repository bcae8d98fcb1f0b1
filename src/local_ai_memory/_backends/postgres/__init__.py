"""The PostgreSQL backend: one memory shared by many hosts."""
