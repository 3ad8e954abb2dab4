"""The outputs a report becomes beyond the terminal text: HTML and the cross-node table.

Owns: :mod:`sections` (a doctor report's sections, once, for every rendering),
:mod:`markdown` (them as a GitHub issue body), :mod:`html` (them as the self-contained
HTML report, charts as inline SVG), :mod:`compare`
(one row per node's report, outliers marked), :mod:`schema` (the JSON reports' published
schema, ``report.schema.json``, and the check every reader runs first).
May import: ``loadscope.advice``, ``loadscope.engine``, ``loadscope.probes`` (the registered
probes' declarations), ``loadscope.base``.
"""
