"""Pricing models, cluster inventory, scoring engine, kube-scheduler extender, trace replay."""
