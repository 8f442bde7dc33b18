"""The one base class of errors caused by user input (files, configuration, data), and the
one reader of the YAML files users give."""

import os

import yaml


class InputError(ValueError):
    """Bad user input; its message names the file or key and what was expected.

    The command line and the nodes print it as one line instead of a traceback.
    """


def located(source: str | None, key: str, message: str) -> str:
    """The one format of input errors: `source: key: message` (`key: message` without a
    source file)."""
    return f'{source}: {key}: {message}' if source else f'{key}: {message}'


def read_yaml(path: str | os.PathLike, error: type[InputError] = InputError):
    """The content of a YAML file (None if empty); `error` naming the file if it cannot be
    read or is not valid YAML."""
    path = os.fspath(path)
    try:
        with open(path, encoding='utf-8') as f:
            return yaml.safe_load(f)
    except OSError as exc:
        raise error(f'{path}: cannot read: {exc.strerror}') from exc
    except yaml.YAMLError as exc:
        raise error(f'{path}: invalid YAML: {exc}') from exc
