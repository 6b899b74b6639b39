"""trace-doctor: offline diagnosis of Tinker fine-tuning runs from their log directory."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("trace-doctor")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+source"
