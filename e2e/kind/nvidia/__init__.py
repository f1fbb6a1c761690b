"""NVIDIA's own DRA driver on kind, with our enforcement on top (``make e2e-nvidia``).

NVIDIA's GPU kubelet plugin (``gpu.nvidia.com``, ``--consumable-shares=100``) is built from a
checkout the user gives (``NVIDIA_DRA_SOURCE``) and runs over the mock NVML of
``NVIDIA/k8s-test-infra`` (``NVML_MOCK_SOURCE``), laid out as a driver root the way NVIDIA's own
CI does; our chart runs with ``nvidiaDriver.enabled``. Not part of ``make test``: the sources are
checkouts only a user can give. See e2e/kind/README.md.
"""
