"""Numbers in API request bodies, taken as JSON numbers only.

pydantic's default turns "2" into 2 and true into 1; for a budget or an id that is more
likely a mistake in a script than what it meant, so the field is refused with its name (422).
A whole number given as 2.0 is refused too; a decimal field takes 1 as 1.0.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Strict

WholeNumber = Annotated[int, Strict()]
RealNumber = Annotated[float, Strict()]
