"""Errors the client raises: one class per kind of answer, each with the HTTP status and stepline's message."""

from __future__ import annotations


class StepLineError(Exception):
    """stepline answered with an error, or could not be reached.

    ``status`` is the HTTP status (``None`` when no answer came), ``message`` stepline's
    ``{"error": ...}`` text (or what went wrong on the way), ``url`` the request's URL.
    """

    def __init__(self, status: int | None, message: str, url: str) -> None:
        super().__init__(f"{status or 'no answer'} from {url}: {message}")
        self.status = status
        self.message = message
        self.url = url


class BadRequest(StepLineError):
    """400: a parameter stepline does not accept (unknown filter, format, ``at``...)."""


class Unauthorized(StepLineError):
    """401: the API needs a bearer token, or the one given is wrong."""


class Forbidden(StepLineError):
    """403: the request's ``Host`` is not one the API answers (see the README's Host check)."""


class NotFound(StepLineError):
    """404: no such run, or no snapshot that matches the request."""


class Conflict(StepLineError):
    """409: the run is already over (abandoning a run that completed, failed or was abandoned)."""


class ServerError(StepLineError):
    """5xx: stepline could not answer (a missing media blob, the writer stopped...)."""


class ConnectionFailed(StepLineError):
    """No HTTP answer: connection refused, timed out, or the answer was not JSON."""


_BY_STATUS: dict[int, type[StepLineError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
}


def error_for(status: int, message: str, url: str) -> StepLineError:
    """The exception for an error answer with ``status``."""
    if status >= 500:
        return ServerError(status, message, url)
    return _BY_STATUS.get(status, StepLineError)(status, message, url)
