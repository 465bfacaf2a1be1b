"""Teams, environment requests, approvals, policy gate, composition, delivery, provisioning, reaper."""
