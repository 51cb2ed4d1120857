#!/usr/bin/env python3
"""Validates a JSON document against a JSON Schema (draft 2020-12): validate_schema.py SCHEMA DOCUMENT.

Exit 0 when valid, 1 with every error (path and message) on stderr when not, 2 for usage errors or unreadable
files, 77 when the jsonschema module is missing (the caller skips the test).
"""
import json
import sys


def main(argv):
    if len(argv) != 3:
        print("usage: validate_schema.py SCHEMA DOCUMENT", file=sys.stderr)
        return 2
    try:
        import jsonschema
    except ImportError:
        print("python3 module jsonschema is not installed (pip install jsonschema)", file=sys.stderr)
        return 77
    try:
        with open(argv[1], encoding="utf-8") as f:
            schema = json.load(f)
        with open(argv[2], encoding="utf-8") as f:
            document = json.load(f)
    except (OSError, ValueError) as e:
        print(f"cannot read input: {e}", file=sys.stderr)
        return 2
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema)
    errors = sorted(validator.iter_errors(document), key=lambda e: list(e.absolute_path))
    for error in errors:
        path = "/".join(str(p) for p in error.absolute_path) or "(root)"
        print(f"{argv[2]}: {path}: {error.message}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
