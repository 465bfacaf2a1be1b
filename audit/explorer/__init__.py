"""The explorer's own reads: how a page of entries is grouped (`grouping.py`, no Django)."""
