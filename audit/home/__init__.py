"""The chain on people's home page: its state (`chain_state.py`), the auditors' card
(`dashboard.py`, registered with `kiln.dashboard`) and their attention items (`attention.py`,
registered with `kiln.attention`)."""
