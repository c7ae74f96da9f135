"""Dumps: the request model, chunk plans, the active dumps, admission, throttling."""
