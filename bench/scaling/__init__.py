"""The parts of ``bench/scale.py`` (what it measures and leaves out: that file's docstring).

``fleet``: the simulated cluster (fake nodes, our agent's slices, allocated claims), grown in
steps; ``bulk``: many API calls from a few kept-alive client threads; ``api_counts``: the API
server's own count of the requests made while something ran; ``viewer``: part 4, ``kubectl vgpu
status``; ``replica_start``: part 3, a webhook replica's start; ``tables``: rows, goals, slopes;
``main``: the command line.
"""
