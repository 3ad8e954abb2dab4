"""The Textual face of loadscope (``loadscope.tui``): the only package that imports Textual.

Owns: the app (its actions declared once: key, palette entry, why-not feedback), its
screens, views and live charts.
May import: everything in the core (the diagnosis runs in a child process it talks to
in JSON lines); nothing imports it but ``loadscope.launch``.
"""
