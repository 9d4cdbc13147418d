"""polar-cli: token-faithful coding-agent trajectories at scale.

Kept import-light on purpose: `polar --help` imports this package, so nothing heavy here.
"""

__version__ = "0.1.0"
