"""Datasets on disk: layouts, locating a data root, splits, verification, download, synthetic data,
statistics and the persistent cache of decoded splits. No torch.

The names in ``__all__`` import from here; each loads its submodule on first use, so importing the
package alone stays light.
"""

from typing import TYPE_CHECKING

from skinet._lazy import lazy_exports

__all__ = [
    "Sample",
    "DatasetIndex",
    "read_layout",
    "DatasetLayout",
    "LAYOUTS",
    "resolve_data_root",
    "index_dataset",
    "verify_dataset",
    "download_dataset",
    "DownloadError",
    "make_synthetic_dataset",
    "ChannelStats",
    "compute_channel_stats",
    "DecodedSplit",
    "decode_split",
    "load_or_build_split",
]

if TYPE_CHECKING:
    from skinet.datasets.cache import load_or_build_split
    from skinet.datasets.decoded import DecodedSplit, decode_split
    from skinet.datasets.download import DownloadError, download_dataset
    from skinet.datasets.layouts import DatasetIndex, Sample
    from skinet.datasets.locate import index_dataset, resolve_data_root
    from skinet.datasets.registry import LAYOUTS, DatasetLayout, read_layout
    from skinet.datasets.stats import ChannelStats, compute_channel_stats
    from skinet.datasets.synthetic import make_synthetic_dataset
    from skinet.datasets.verify import verify_dataset
else:
    __getattr__, __dir__ = lazy_exports(
        __name__,
        __all__,
        {
            "layouts": ("Sample", "DatasetIndex"),
            "registry": ("read_layout", "DatasetLayout", "LAYOUTS"),
            "locate": ("resolve_data_root", "index_dataset"),
            "verify": ("verify_dataset",),
            "download": ("download_dataset", "DownloadError"),
            "synthetic": ("make_synthetic_dataset",),
            "stats": ("ChannelStats", "compute_channel_stats"),
            "decoded": ("DecodedSplit", "decode_split"),
            "cache": ("load_or_build_split",),
        },
    )
