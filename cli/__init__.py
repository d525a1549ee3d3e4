"""magnetsdk.cli: the ``magnet`` command, a thin shell over the library."""
