"""The outputs a report becomes: the terminal's text, Markdown, HTML and the cross-node table.

Owns: :mod:`content` (a report's fixes as every output shows them, and the blocks a
section is made of), :mod:`sections` (a doctor report's sections, once, for every rendering),
:mod:`text` (the blocks as terminal text), :mod:`probe_text`, :mod:`bench_text` and
:mod:`rank_text` (the probe's summary, the trial table and the ranks' tables for a
terminal),
:mod:`markdown` (them as a GitHub issue body), :mod:`html` (them as the self-contained
HTML report, charts as inline SVG), :mod:`compare`
(one row per node's report, outliers marked), :mod:`schema` (the JSON reports' published
schema, ``report.schema.json``, and the check every reader runs first).
May import: ``loadscope.advice``, ``loadscope.engine``, ``loadscope.probes`` (the registered
probes' declarations), ``loadscope.base``.
"""
