"""The diagnosis: probes, the trials they call for and the advice, as one report.

Owns: :mod:`doctor` (the run within a budget and the trials it adds), :mod:`trial_plan`
(the doctor's plan: which trials, how often, on how much), :mod:`doctor_report` (the
report and its terminal text; its Markdown and HTML are ``loadscope.report``'s),
:mod:`redaction` (a report without host names or paths), :mod:`session` (one diagnosis
as the app runs it, with its events), :mod:`engine_process` (that session in a child
process speaking JSON lines to the app), :mod:`cluster` (every node diagnoses itself,
rank 0 collects), :mod:`fleet` (each node's result and the fleet report rank 0 writes),
:mod:`k8s` (the Kubernetes objects for a cluster run), :mod:`demo` (a synthetic model
through the emulated slow disk, diagnosed), :mod:`timing` (the user's own command timed
cold, as it is and after each no-code fix) and :mod:`timing_text` (its table).
May import: everything below it (``report``, ``advice``, ``engine``, ``actions``,
``model``, ``tools``, ``loaders``, ``probes``, ``base``); only the CLI and the app import it.
"""
