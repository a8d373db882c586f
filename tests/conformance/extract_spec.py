#!/usr/bin/env python3
"""Extracts the operations Woodlark serves from an upstream OpenAPI 2 spec (JSON or YAML).

Usage: extract_spec.py FULL_SPEC PATH_PREFIX... > extract.json
  algod:  extract_spec.py algod.oas2.json /v2/participation /debug/settings/
  Clever: extract_spec.py clever-v3.yml /events

Keeps the paths starting with a prefix, every definition, parameter and response they
reference (transitively), and the document-level settings (security, consumes, produces).
The output is what the conformance run tests against; `run.sh` re-extracts and compares when
the full specs are beside the repository.
"""
import json
import sys

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
    path, prefixes = sys.argv[1], tuple(sys.argv[2:])
    with open(path) as f:
        if path.endswith((".yml", ".yaml")):
            import yaml  # PyYAML, a schemathesis dependency

            spec = yaml.safe_load(f)
        else:
            spec = json.load(f)
    out = {key: spec[key] for key in TOP_LEVEL if key in spec}
    out["paths"] = {p: ops for p, ops in spec["paths"].items() if p.startswith(prefixes)}
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
