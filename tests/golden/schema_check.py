#!/usr/bin/env python3
"""schema_check.py SCHEMA FILE... - validates JSON files against a JSON Schema (python3 stdlib only).

Implements the subset of draft-07 that docs/plan.schema.json uses: type (name or list), const,
enum, properties, required, additionalProperties (bool or schema), items (one schema),
minItems, maxItems, minimum, maximum, anyOf, oneOf, and $ref to "#/definitions/NAME". An
unsupported keyword in the schema is an error, so the subset cannot silently grow. Prints one
line per error ("FILE: PATH: message") and exits 1 when any file is invalid, 2 on bad usage.
"""
import json
import sys

KNOWN = {"$schema", "$id", "title", "description", "type", "const", "enum", "properties",
         "required", "additionalProperties", "items", "minItems", "maxItems", "minimum",
         "maximum", "anyOf", "oneOf", "$ref", "definitions"}
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
}


def resolve(root, ref):
    if not ref.startswith("#/definitions/"):
        raise ValueError("unsupported $ref %r" % ref)
    return root["definitions"][ref[len("#/definitions/"):]]


def validate(root, schema, value, path, errors):
    unknown = set(schema) - KNOWN
    if unknown:
        raise ValueError("unsupported schema keywords %s at %s" % (sorted(unknown), path))
    if "$ref" in schema:
        validate(root, resolve(root, schema["$ref"]), value, path, errors)
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(TYPES[n](value) for n in names):
            errors.append("%s: expected %s, got %s" % (path, "/".join(names), json.dumps(value)[:60]))
            return
    if "const" in schema and value != schema["const"]:
        errors.append("%s: expected %s" % (path, json.dumps(schema["const"])))
    if "enum" in schema and value not in schema["enum"]:
        errors.append("%s: %s is not one of %s" % (path, json.dumps(value), schema["enum"]))
    if "minimum" in schema and TYPES["number"](value) and value < schema["minimum"]:
        errors.append("%s: %s < minimum %s" % (path, value, schema["minimum"]))
    if "maximum" in schema and TYPES["number"](value) and value > schema["maximum"]:
        errors.append("%s: %s > maximum %s" % (path, value, schema["maximum"]))
    for key in ("anyOf", "oneOf"):
        if key in schema:
            ok = 0
            for sub in schema[key]:
                e = []
                validate(root, sub, value, path, e)
                ok += not e
            if ok == 0 or (key == "oneOf" and ok > 1):
                errors.append("%s: matches %d of the %s alternatives" % (path, ok, key))
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in value:
                errors.append("%s: missing required key %r" % (path, k))
        extra = schema.get("additionalProperties", True)
        for k, v in value.items():
            sub = path + "." + k if path else k
            if k in props:
                validate(root, props[k], v, sub, errors)
            elif extra is False:
                errors.append("%s: key not in the schema" % sub)
            elif isinstance(extra, dict):
                validate(root, extra, v, sub, errors)
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append("%s: fewer than %d items" % (path, schema["minItems"]))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append("%s: more than %d items" % (path, schema["maxItems"]))
        if "items" in schema:
            for i, v in enumerate(value):
                validate(root, schema["items"], v, "%s[%d]" % (path, i), errors)


def main(argv):
    if len(argv) < 3:
        print("usage: schema_check.py SCHEMA FILE...", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        schema = json.load(f)
    bad = 0
    for name in argv[2:]:
        with open(name) as f:
            doc = json.load(f)
        errors = []
        validate(schema, schema, doc, "", errors)
        for e in errors:
            print("%s: %s" % (name, e))
        bad += bool(errors)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
