"""corpusprep: turn any text corpus into the token files a GPT trains on."""

from corpusprep.config import register_resolvers

__version__ = "0.1.0"

register_resolvers()
