"""What every scalenc estimator shares: input preparation, class and feature checks, output
block maps, stage timings, the streamed ``score``, and the parameter-constraint vocabulary."""
