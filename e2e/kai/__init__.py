"""vgpu-bridge with KAI Scheduler clusters (issues 8 and 27), on the real control plane.

Always: our webhook with its KAI settings, registered the way docs/kai.md says, next to a
recording stand-in for KAI's mutating webhook (`mutating-kai-admission`), in
`test_kai_admission.py` (on NVIDIA's DRA driver with our enforcer, profile nvidia:
`test_kai_nvidia_admission.py`), and the build command on small KAI-shaped trees
(`test_kai_build.py`).
With a KAI build (`python -m e2e.kai build --source DIR`, or `KAI_BIN_DIR` and `KAI_CRD_DIR`):
the real KAI scheduler and binder place and bind pods, in `test_real_kai*.py` (`make e2e-kai`).
KAI's Go module is not served by the module proxy these machines reach, so `make test` never
builds KAI; the user provides its source tree.
"""
