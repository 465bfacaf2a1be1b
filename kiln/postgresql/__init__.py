"""Kiln's PostgreSQL database backend (ENGINE `kiln.postgresql`): Django's, plus deferred rows."""
