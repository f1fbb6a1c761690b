"""The e2e tier with the real Volcano: vc-scheduler and vc-controller-manager built from Volcano's
Go module (``gotools/``), its CRDs from the same module, on the session's local control plane."""
