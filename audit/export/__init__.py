"""An auditor's export of the chain: its JSONL or CSV lines with the checkpoints and proofs that
cover them (`lines`), and the offline verifier of such a file (`verify`, no Django:
`python -m audit.export.verify FILE --public-key KEY`). This package's own import loads nothing.
"""
