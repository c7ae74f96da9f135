"""``dblog verify``: a source's tables against a target, range by range."""
