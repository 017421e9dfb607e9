"""The exception for user mistakes: the CLI prints its message on one line, no traceback."""


class UserError(Exception):
    """A problem the user can fix: the message says what is wrong, where, and what to do."""
