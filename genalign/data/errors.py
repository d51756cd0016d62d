"""The error every data reader raises for a bad source or row (shared by :mod:`.sources`, :mod:`.hub` and
:mod:`.prepare`, so that none of them imports another just for the class)."""


class DataError(ValueError):
    """A dataset file or row that cannot be used; the message names the file, the row and the column."""
