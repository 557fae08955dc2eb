"""Where a job runs: one module per backend behind the ``Backend`` protocol (``base``), named in ``registry``."""
