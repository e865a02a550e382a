"""An operator as the importers and the built-in loader hand it over, before it is stored."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from apps.operators.spec import OperatorSpec


@dataclass(frozen=True)
class OperatorDefinition:
    spec: OperatorSpec
    reference_kind: str  # "kope" | "kernelbench" | "npukernelbench" (see reference_loading.LOADERS)
    reference_source: dict[str, Any]
    origin: str
    origin_path: str = ""
    scale: float = 1.0
    starting_kernels: dict[str, str] = field(default_factory=dict)  # target -> source

    def content_hash(self) -> str:
        material = {
            "spec": self.spec.as_json(),
            "kind": self.reference_kind,
            "source": self.reference_source,
            "scale": self.scale,
            "kernels": self.starting_kernels,
        }
        return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()

    def runner_request(self, *, seed: int = 0) -> dict[str, Any]:
        """The request refrun needs to run this operator's reference on every case."""
        return {
            "kind": self.reference_kind,
            "source": self.reference_source,
            "cases": [
                {
                    "case_id": c.case_id,
                    "params": c.params,
                    "dtype": c.dtype,
                    "attributes": self.spec.attribute_values(c.params),
                }
                for c in self.spec.cases
            ],
            "seed": seed,
        }
