"""vgpu-bridge with KAI Scheduler clusters (issue 8), on the real control plane.

What runs here today: our webhook with its KAI settings, registered the way docs/kai.md says,
next to a recording stand-in for KAI's own mutating webhook (`mutating-kai-admission`).
The real KAI scheduler and binder are not built: their Go module is not served by the module
proxy these machines reach (docs/kai.md, "Proof with the real KAI Scheduler").
"""
