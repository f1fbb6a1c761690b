"""The kind path (``make e2e-kind``): a kind cluster at Kubernetes >= 1.36 with CDI on, our two
images built and loaded, the chart installed with mock GPUs, and the example scenarios run
against kind's kubeconfig with a real kubelet and containerd. Needs Docker and kind, which the
project's own machines do not have: there, only the files are checked (``test_kind_files.py``)."""
