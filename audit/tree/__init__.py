"""The audit log as an RFC 6962 Merkle tree: its math (`merkle`, no Django), the standalone
verifier auditors download (`tlog_verify`, the standard library and `cryptography` only), the web
process's tile cache (`cache`) and hot reads (`serving`), the transparency log's API (`api`), and
the stored tree's verification against the chain (`verification`). The writer grows the tree in
`audit.services.tree`. This package's own import loads nothing.
"""
