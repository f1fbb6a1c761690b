"""vgpu-bridge: HAMi-style GPU sharing requests on Kubernetes DRA."""

__version__ = "0.1.0"
