"""Stand-ins the tests (and the development-only benchmarks) run against: servers Kiln talks to
(kube-apiserver, Argo CD), never Kiln's own code. Not part of the product or its image."""
