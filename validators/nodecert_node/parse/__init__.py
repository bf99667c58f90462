"""Pure parsers over real tool output. Each raises ParseError naming what is wrong."""


class ParseError(ValueError):
    """The text is not the tool output the parser expects (truncated, other format, ...)."""
