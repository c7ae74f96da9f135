"""The capture loop: the worker, its sessions, the windows, the output buffer."""
