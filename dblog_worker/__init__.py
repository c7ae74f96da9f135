"""dblog: watermark-based change-data capture (Netflix DBLog) in Python."""

__version__ = "0.1.0"
