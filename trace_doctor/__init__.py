"""trace-doctor: offline diagnosis of Tinker fine-tuning runs from their log directory."""

__version__ = "0.1.0"
