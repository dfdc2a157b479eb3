"""`gemmgen tune`: measure tiles of a spec's kernels and write the winners
back into the spec as a `tuned` block (docs/spec.md, "Tuned tiles").

- `shapes`: `--shapes` text, presets, default shapes, skewed group sizes;
- `candidates`: legal tiles (the validator's and the backend's own checks),
  the cost model, pruning;
- `timing`: rendering a candidate's module, timing it with JAX, the
  reference check of a winner (JAX and NumPy imported only there, inside
  functions);
- `winners`: the winner of each shape (no churn within the noise), the
  rules covering the measured shapes;
- `rewrite`: the block's text, reading the previous one, the atomic write;
- `session`: one run, from kernels and shapes to the new spec text.
"""
