"""Identity: JWT bearer tokens (RS256 against a JWKS), session users, roles and permissions."""
