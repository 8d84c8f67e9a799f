"""The building blocks an agent's networks and updates are made of: layers and the SimBa encoder,
running normalization, NaP's projection, vmapped ensembles, flat parameter views, replay buffers
(uniform and fading), row sorting and the compile-or-eager switch.

Nothing here knows about runs, folders or experiments: a block imports only torch, NumPy and other
blocks.
"""
