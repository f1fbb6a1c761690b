"""End-to-end tier: a real local Kubernetes control plane and the scenarios run against it."""
