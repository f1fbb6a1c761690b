"""The chart's container images as a product: ``make images`` (``python -m images``)."""
