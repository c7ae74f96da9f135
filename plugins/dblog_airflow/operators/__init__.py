"""Operators: queue a dump, steer it."""
