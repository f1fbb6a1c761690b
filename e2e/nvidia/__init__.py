"""Stand-ins for NVIDIA's DRA driver (``gpu.nvidia.com``) in the e2e tiers: its published objects
exactly as its kubelet plugin and chart make them (docs/reference/nvidia-dra-driver.md)."""
