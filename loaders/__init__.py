"""Loader strategies and the checkpoint formats they read (``loadscope.loaders``).

Nothing here imports Textual or the core above it; the safetensors header parser
and torch archive reader import neither torch nor safetensors.
"""
