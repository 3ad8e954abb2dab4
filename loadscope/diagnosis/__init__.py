"""The diagnosis: probes, the trials they call for and the advice, as one report.

Owns: :mod:`doctor` (the plan within a budget, the run, the report and its terminal
text; its Markdown and HTML are ``loadscope.report``'s), :mod:`session` (one diagnosis
as the app runs it, with its events), :mod:`engine_process` (that session in a child
process speaking JSON lines to the app), :mod:`cluster` (every node diagnoses itself,
rank 0 writes the fleet report), :mod:`demo` (a synthetic model through the emulated
slow disk, diagnosed).
May import: everything below it (``report``, ``advice``, ``engine``, ``actions``,
``model``, ``tools``, ``loaders``, ``probes``, ``base``); only the CLI and the app import it.
"""
