"""Typed errors of the peer, as in include/batchsweep/errors.hpp: each ends the program with exit code 2 and a
message that names the flag, the config field or the file at fault."""

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NOTHING_RAN = 4  # the sweep finished, but no batch ran ok: nothing to recommend (as batchsweep run)


class PeerError(Exception):
    """Base class: an error the user can fix. `exit_code` is what the command line exits with."""

    exit_code = EXIT_USAGE


class UsageError(PeerError):
    """A flag or argument is wrong; the message starts with the flag (`--batch: ...`)."""


class ConfigError(PeerError):
    """A model config is wrong; the message names the file and the JSON path of the field."""

    def __init__(self, source: str, path: str, message: str):
        self.source = source
        self.path = path
        self.message = message  # without the source and path
        super().__init__(f"{source}: {path}: {message}" if path else f"{source}: {message}")


class InputError(PeerError):
    """A file cannot be read or written, or another tool's output cannot be used; the message names it."""


class ParameterMismatch(PeerError):
    """The PyTorch module and batchsweep's plan disagree on the parameter count."""
