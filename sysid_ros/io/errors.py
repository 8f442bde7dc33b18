"""The one base class of errors caused by user input (files, configuration, data)."""


class InputError(ValueError):
    """Bad user input; its message names the file or key and what was expected.

    The command line and the nodes print it as one line instead of a traceback.
    """
