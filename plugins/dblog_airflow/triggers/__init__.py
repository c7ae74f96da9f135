"""The trigger that follows a dump in the triggerer."""
