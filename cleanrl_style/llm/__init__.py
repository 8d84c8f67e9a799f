"""Plumbing of the language-model agents (``agents/grpo.py``, ``rc_grpo.py``, ``turnsight.py``).

- ``model``: offline loading (SmolLM2-135M-Instruct by default), precision, special tokens, LoRA, export.
- ``generation``: batched multi-turn sampling that keeps each episode's key/value cache across turns.
- ``rollout``: episodes in any text task family (``envs.text.families``) as token sequences with a
  policy mask; group collection; held-out evaluation; tokenizing finished conversations.
- ``tokens``: log-probabilities of chosen tokens and one optimizer step of any per-token loss.
- ``train``: policy, reference and optimizer; checkpoints; per-iteration helpers and metrics.
- ``args``: ``LLMRunArgs``, the flags the agents share.
- ``progress``: progress bars or plain lines inside an iteration.

The algorithms (advantages, losses, RCTP, hindsight weights) are in the agent files.
"""
