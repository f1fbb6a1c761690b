"""A real worker node on this machine (issue 10): kubelet + containerd + runc, joined to the local
control plane, so a CDI spec reaches a real container. ``python -m e2e.realnode build|spike|down``.
"""
