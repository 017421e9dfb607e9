"""corpusprep's configs (shipped as corpusprep.conf): Hydra imports this package to read
them, so their ${cp.*} resolvers are registered first."""

import corpusprep.config  # noqa: F401
