"""nodecert: provision, validate, certify and re-validate NVIDIA GPU servers."""

__version__ = "0.1.0"
