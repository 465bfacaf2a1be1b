"""Tables of this app (none yet)."""
