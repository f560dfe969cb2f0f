"""The chain's Dagster assets, one module each, wired together in `pipelines.definitions`."""

GROUP = "chain"
"""The one asset group of every asset of the chain: with three (freeze, store, prior), Dagster's asset lineage
opened on three collapsed boxes and a newcomer saw no asset before expanding each; with one, every asset and
every dependency shows on first open."""
