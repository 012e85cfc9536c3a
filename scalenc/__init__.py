"""scalenc: spectral/kernel classifiers trained out of core, on one machine or a Dask cluster."""

__version__ = "0.1.0.dev0"
