"""Storage and system probes (``loadscope.probes``): each one job, a time budget, a typed result.

The probes arrive with the storage-probe issue; this package is the bottom of the
layer stack and never imports from the core, the loaders or Textual.
"""
