"""The chain: where its files live (`paths`) and its steps (`steps`, `evaluation`), each with its on-disk contract.

fold -> import -> export -> fit -> evaluate (judge) -> install. The Dagster assets, `emmy fit`,
`emmy main` and the installed prior's refit call these functions and nothing else, so a step
has one meaning wherever it runs. Importing this package imports nothing heavy.
"""
