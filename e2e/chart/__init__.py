"""The Helm chart's tests: helm built from its Go module, lint, template, values schema, and the
rendered objects checked by the local control plane (server-side dry run, RBAC and the
ValidatingAdmissionPolicy for real)."""
