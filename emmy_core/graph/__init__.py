"""Model -> graph -> loop programs: capture (torch.fx), passes, lowering, forks.

`capture.capture(module, example_inputs)` gives the op graph (`ops.Graph`) and weights;
`pipeline.compile_graph(graph)` runs the passes of `pipeline.PASSES` in order and lowers
(`lower.Lowered`); `pipeline.compile_module` captures small stand-ins and specialises, so a
model is never run at the sizes asked for; `execute.run_lowered(lowered, inputs)` runs it under
the reference interpreter (`emmy_core.compile` runs generated kernels instead);
`forks.forks(lowered, card)` lists the forks the compile resolves, each keyed by a `ForkKey`;
`models.build_model(name)` and `serving.load_serving_matrix()` name what the release
gate covers. Nothing is imported here, so `import emmy_core.graph` stays light.
"""
