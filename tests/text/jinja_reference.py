# The reference for tests/text/jinja_test.cpp: each case's template rendered by
# Jinja2 itself (Debian's python3-jinja2) in the environment Hugging Face transformers renders
# chat templates in (ImmutableSandboxedEnvironment with trim_blocks, lstrip_blocks and loop
# controls; its raise_exception and tojson). Reads {"cases": [{"template", "vars"}]} from the
# file argv[1]; prints [{"text": ...} or {"error": ...}] in order.
import json
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
out = []
for case in json.load(open(sys.argv[1]))["cases"]:
    try:
        out.append({"text": env.from_string(case["template"]).render(**case["vars"])})
    except Exception as e:  # noqa: BLE001 - every failure is a result to compare
        out.append({"error": f"{type(e).__name__}: {e}"})
print(json.dumps(out))
