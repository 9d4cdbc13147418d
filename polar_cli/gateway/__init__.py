"""gateway: the embedded provider-compatible proxy (see DESIGN.md).

Public API: `Gateway` (async context manager), `Upstream` (the seam it calls), `SessionStats`.
"""

from polar_cli.gateway.server import Gateway, Upstream
from polar_cli.gateway.sessions import KEY_PREFIX, SessionStats

__all__ = ["KEY_PREFIX", "Gateway", "SessionStats", "Upstream"]
