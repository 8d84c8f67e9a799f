"""The plumbing of one run: arguments and their checks (``cli``), the run folder with its logs,
checkpoints and resume (``run``, ``logger``, ``checkpoint``, ``progress``), provenance, episode
statistics, videos, and evaluation of a saved policy (``python -m cleanrl_style.runs.evaluate``).

It may use the building blocks and never imports the experiment tooling built on it.
"""
