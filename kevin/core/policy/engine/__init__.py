"""The fast static-cache decoding path that only the ``hf`` backend imports."""
