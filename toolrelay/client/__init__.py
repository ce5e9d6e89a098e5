"""toolrelay's Python SDK: the HTTP API as data (``operations``, ``responses``, ``flows``), its records and errors."""
