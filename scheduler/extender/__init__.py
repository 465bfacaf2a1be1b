"""Kiln's kube-scheduler extender (`k8s.io/kube-scheduler/extender/v1`), in parts.

  protocol  the wire types: ExtenderArgs decoded and validated (`parse_args`),
            pod requests and node objects read, the ExtenderFilterResult shape
  snapshot  the inventory as arrays (`NodeSnapshot`) and its cache of resolved
            candidate lists (`Resolution`)
  names     node names looked up from the bytes of a JSON array (`NameTable`)
  encoding  fixed-width JSON items gathered into the long answers
  verbs     filter and prioritize: the numpy reference and the fast bytes
  handler   the HTTP handler (`extender_call`) and the dedicated ASGI app
  server    uvicorn's protocol sending each response as one socket write

Imports point one way: encoding, names <- snapshot <- protocol <- verbs <- handler; server
stands alone. Callers import the module they need: this package re-exports
nothing, so reading the inventory (`snapshot`) loads neither numba nor Django.
"""
