"""kubernetes-validate --strict over many files for one Kubernetes version, fast.

Run as a script by the interpreter whose kubernetes-validate ships that version's
schemas (tests/chart/scan.py picks it): ``python kube_validate_runner.py 1.20.0 FILE...``.
Prints one JSON object: ``errors`` (file, resource, path, message), ``unknown`` (kinds
with no schema, e.g. cert-manager's) and ``checked`` (objects validated).

It calls kubernetes-validate's own ``validate(data, version, strict=True)``. The releases
that ship 1.20-1.24 (jsonschema's RefResolver) re-read each schema and its
``_definitions.json`` and re-check the schema itself for every object (minutes per
version on these machines); for them schema files, referenced documents and validators
are cached. Identical objects (the same RBAC in every example) are validated once.
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
import types
import warnings
from typing import Any

import jsonschema
import kubernetes_validate.utils as kvu
import yaml


@functools.cache
def _schema_file(path: str) -> Any:
    with open(path) as fh:
        return json.load(fh)


class _CachedJson(types.SimpleNamespace):
    decoder = json.decoder

    @staticmethod
    def load(fh: Any) -> Any:
        return _schema_file(fh.name)


@functools.cache
def _remote(uri: str) -> Any:
    return jsonschema.RefResolver("", {}).resolve_remote(uri)


_validators: dict[int, Any] = {}


def _validate(data: Any, schema: Any, resolver: Any = None) -> None:
    validator = _validators.get(id(schema))
    if validator is None:
        cls = jsonschema.validators.validator_for(schema)
        validator = _validators[id(schema)] = cls(schema, resolver=resolver)
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is not None:
        raise error


def _cache_schemas() -> None:
    """Only for the RefResolver-based releases (the newer ones are fast as they are)."""
    if "RefResolver" not in inspect.getsource(kvu.validate):
        return

    class _Resolver(jsonschema.RefResolver):
        def resolve_remote(self, uri: str) -> Any:
            return _remote(uri)

    kvu.json = _CachedJson()
    kvu.jsonschema = types.SimpleNamespace(
        RefResolver=_Resolver,
        validate=_validate,
        ValidationError=jsonschema.ValidationError,
        RefResolutionError=getattr(jsonschema, "RefResolutionError", Exception),
    )


def main(version: str, files: list[str]) -> dict[str, Any]:
    errors: list[dict[str, str]] = []
    unknown: set[str] = set()
    seen: set[str] = set()
    for name in files:
        with open(name) as fh:
            docs = [d for d in yaml.safe_load_all(fh) if d]
        for doc in docs:
            key = json.dumps(doc, sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            what = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            try:
                kvu.validate(doc, version, strict=True)
            except kvu.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                errors.append(
                    {"file": name, "resource": what, "path": path, "message": exc.message}
                )
            except kvu.SchemaNotFoundError:
                unknown.add(str(doc.get("kind")))
    return {"errors": errors, "unknown": sorted(unknown), "checked": len(seen)}


if __name__ == "__main__":
    warnings.simplefilter("ignore", DeprecationWarning)
    _cache_schemas()
    print(json.dumps(main(sys.argv[1], sys.argv[2:])))
