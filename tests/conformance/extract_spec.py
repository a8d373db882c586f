#!/usr/bin/env python3
"""Extracts the participation interface from algod's OpenAPI 2 spec.

Usage: extract_spec.py FULL_SPEC > algod-participation.oas2.json

Keeps the nine operations Woodlark serves (/v2/participation*, /debug/settings/*), every
definition, parameter and response they reference (transitively), and the document-level
settings (security, consumes, produces). The output is what the conformance run tests
against; `run.sh` re-extracts and compares when the full spec is beside the repository.
"""
import json
import sys

PREFIXES = ("/v2/participation", "/debug/settings/")
TOP_LEVEL = ("swagger", "info", "host", "basePath", "schemes", "consumes", "produces",
             "securityDefinitions", "security")


def refs(node, out):
    """Collects every "$ref" target below node."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                out.add(value)
            else:
                refs(value, out)
    elif isinstance(node, list):
        for value in node:
            refs(value, out)


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    out = {key: spec[key] for key in TOP_LEVEL if key in spec}
    out["paths"] = {p: ops for p, ops in spec["paths"].items() if p.startswith(PREFIXES)}
    seen, todo = set(), set()
    refs(out["paths"], todo)
    while todo:
        ref = todo.pop()
        if ref in seen:
            continue
        seen.add(ref)
        _, section, name = ref.split("/", 2)
        target = spec[section][name]
        out.setdefault(section, {})[name] = target
        refs(target, todo)
    json.dump(out, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
