"""pagecast: learn how programs touch memory pages and move pages before they are needed."""

__version__ = "0.1.0"
