"""MLflow tracking: store URIs, run naming, failed runs and local server helpers.

The names in ``__all__`` import from here; each loads its submodule on first use, so importing the
package alone stays light.
"""

from typing import TYPE_CHECKING

from skinet._lazy import lazy_exports

__all__ = [
    "TrackingError",
    "resolve_tracking_uri",
    "make_run_name",
    "ensure_experiment",
    "mark_run_failed",
    "LocalServer",
    "start_local_server",
    "check_tracking_server",
]

if TYPE_CHECKING:
    from skinet.tracking.mlflow_utils import (
        TrackingError,
        ensure_experiment,
        make_run_name,
        mark_run_failed,
        resolve_tracking_uri,
    )
    from skinet.tracking.server import LocalServer, check_tracking_server, start_local_server
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        __all__,
        {
            "mlflow_utils": (
                "TrackingError",
                "resolve_tracking_uri",
                "make_run_name",
                "ensure_experiment",
                "mark_run_failed",
            ),
            "server": ("LocalServer", "start_local_server", "check_tracking_server"),
        },
    )
