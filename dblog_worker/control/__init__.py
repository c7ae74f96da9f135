"""The Redis control plane: the stores, the lease, and the front ends' commands."""
