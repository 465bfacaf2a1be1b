"""Kiln's kube-scheduler extender (`k8s.io/kube-scheduler/extender/v1`), in parts.

  quantity  Kubernetes resource quantities read and bounded (`parse_quantity`), and
            `ProtocolError`
  protocol  the wire types: ExtenderArgs decoded and validated (`parse_args`),
            pod requests and node objects read, the ExtenderFilterResult shape
  snapshot  the inventory as arrays (`NodeSnapshot`) and its cache of resolved
            candidate lists (`Resolution`)
  names     the inventory's names as a hash table keyed by their JSON bytes (`NameTable`)
  lookup    a NodeNames array's names found in that table from its bytes, compiled
  encoding  fixed-width JSON items gathered into the long answers
  verbs     filter and prioritize: the numpy reference and the fast bytes
  handler   the HTTP handler (`extender_call`) and the dedicated ASGI app
  server    uvicorn's protocol sending each response as one socket write
  probes    the process's readiness (inventory loaded) and its certificate's expiry
  client    kube-scheduler's side: the HTTP/1.1 client the simulated scheduler and the
            benchmark call the extender with

Imports point one way: encoding, names <- snapshot <- protocol <- verbs <- handler, and
names <- lookup <- protocol, quantity <- protocol; server and client stand alone. Callers
import the module they need: this package re-exports nothing, so reading the inventory
(`snapshot`) loads neither numba nor Django.
"""
