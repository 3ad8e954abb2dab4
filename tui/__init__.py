"""The Textual face of loadscope (``loadscope.tui``): the only package that imports Textual.

Owns: the app (``app``), its actions declared once (``actions``: key, palette entry,
why-not feedback), its link to the engine child (``engine_link``), the fixes it copies
or applies (``fixes``), the files it writes (``report_files``), its screens, views
(``views``, ``probes_view``) and live charts.
May import: everything in the core (the diagnosis runs in a child process it talks to
in JSON lines); nothing imports it but ``loadscope.__main__`` (the ``loadscope`` command
is :mod:`loadscope.tui.launch`: the app with no arguments, else the CLI, which never
imports Textual).
"""
