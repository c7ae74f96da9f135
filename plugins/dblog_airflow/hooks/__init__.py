"""The dblog hook: a dblog connection to the worker's Redis control plane."""
