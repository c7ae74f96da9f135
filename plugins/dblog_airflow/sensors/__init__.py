"""The deferrable sensor that waits for a dump."""
