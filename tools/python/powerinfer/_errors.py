"""Status codes and PowerInferError."""

from . import _lib

# The status codes of include/powerinfer.h (values pinned forever).
PI_OK = 0
PI_ERR_INVALID_ARG = -1
PI_ERR_NOMEM = -2
PI_ERR_IO = -3
PI_ERR_FORMAT = -4
PI_ERR_UNSUPPORTED = -5
PI_ERR_ABORTED = -6
PI_ERR_NOT_FOUND = -7
PI_ERR_TYPE = -8
PI_ERR_RANGE = -9
PI_ERR_INTERNAL = -10
PI_ERR_NUMERIC = -11

STATUS_NAMES = {
    PI_OK: "PI_OK",
    PI_ERR_INVALID_ARG: "PI_ERR_INVALID_ARG",
    PI_ERR_NOMEM: "PI_ERR_NOMEM",
    PI_ERR_IO: "PI_ERR_IO",
    PI_ERR_FORMAT: "PI_ERR_FORMAT",
    PI_ERR_UNSUPPORTED: "PI_ERR_UNSUPPORTED",
    PI_ERR_ABORTED: "PI_ERR_ABORTED",
    PI_ERR_NOT_FOUND: "PI_ERR_NOT_FOUND",
    PI_ERR_TYPE: "PI_ERR_TYPE",
    PI_ERR_RANGE: "PI_ERR_RANGE",
    PI_ERR_INTERNAL: "PI_ERR_INTERNAL",
    PI_ERR_NUMERIC: "PI_ERR_NUMERIC",
}


def status_str(status):
    """pi_status_str: the library's short English description of a status."""
    return _lib.lib().pi_status_str(int(status)).decode("utf-8", "replace")


class PowerInferError(Exception):
    """A libpowerinfer call failed.

    status:      the negative PI_ERR_* value the call returned;
    status_name: its name in the header ("PI_ERR_IO", ...);
    description: pi_status_str(status) ("i/o error", ...);
    message:     the library's message for this failure (pi_model_errmsg,
                 pi_ctx_errmsg or the call's errbuf), "" when it gave none;
    call:        the C function that failed."""

    def __init__(self, status, message="", call=""):
        self.status = int(status)
        self.status_name = STATUS_NAMES.get(self.status, "PI_STATUS_%d" % self.status)
        try:
            self.description = status_str(self.status)
        except Exception:  # the library could not be loaded: keep the number
            self.description = ""
        self.message = message or ""
        self.call = call
        text = "%s (%s)" % (self.status_name, self.description) if self.description \
            else self.status_name
        if call:
            text = "%s: %s" % (call, text)
        if self.message:
            text += ": " + self.message
        super().__init__(text)


def check(status, call, message=None):
    """Raise PowerInferError for a negative status; return it otherwise.

    message: the library's message, or a zero-argument callable producing it (read
    only on failure, before any other call on the handle)."""
    if status < 0:
        msg = message() if callable(message) else message
        raise PowerInferError(status, msg or "", call)
    return status
