"""The one place the version lives (read by setuptools and by ``loadscope --version``)."""

__version__ = "0.1.0"
