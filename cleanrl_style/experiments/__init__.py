"""Experiment tooling built on single runs: grids and recipes of runs (``sweep``, ``recipes``),
their export into ``results/`` (``results``) and the figures and tables (``plot``), with the
published reference curves the figures can draw.

Commands: ``python -m cleanrl_style.experiments.sweep``, ``python -m cleanrl_style.experiments.results``,
``python -m cleanrl_style.experiments.plot``.
"""
