"""The one base class of errors caused by user input (files, configuration, data)."""


class InputError(ValueError):
    """Bad user input; its message names the file or key and what was expected.

    The command line and the nodes print it as one line instead of a traceback.
    """


def located(source: str | None, key: str, message: str) -> str:
    """The one format of input errors: `source: key: message` (`key: message` without a
    source file)."""
    return f'{source}: {key}: {message}' if source else f'{key}: {message}'
