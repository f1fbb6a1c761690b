"""vgpu-bridge with KAI Scheduler clusters (issue 8), on the real control plane.

Always: our webhook with its KAI settings, registered the way docs/kai.md says, next to a
recording stand-in for KAI's mutating webhook (`mutating-kai-admission`), in
`test_kai_admission.py`. With a KAI build given (`KAI_BIN_DIR`, `KAI_CRD_DIR`, `KAI_VERSION`):
the real KAI scheduler and binder place and bind pods, in `test_real_kai.py`. Nothing here builds
KAI: its Go module is not served by the module proxy these machines reach (docs/kai.md).
"""
