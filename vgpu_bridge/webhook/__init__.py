"""The admission webhook: the I/O shell that runs core translations at admission time."""
