"""JSON Schema validation of response bodies against OpenAI's published OpenAPI spec.

The spec is read from ../shared/testdata/openai-openapi/openapi.yaml (relative to the repository
root; never copied into the repository). It is OpenAPI 3.1, whose schemas are JSON Schema 2020-12,
except that some of them still carry OpenAPI 3.0's `nullable: true`; 2020-12 ignores that keyword,
so it is rewritten here to what it means (`anyOf: [schema, {type: null}]`). `$ref`s are resolved
through a `referencing` registry that holds the whole document.
"""

import copy
import functools
import pathlib

import jsonschema
import referencing
import referencing.jsonschema
import yaml

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC_PATH = REPO_ROOT.parent / "shared" / "testdata" / "openai-openapi" / "openapi.yaml"
_SPEC_URI = "urn:kiln:openai-openapi"


def _rewrite_nullable(node):
    if isinstance(node, list):
        return [_rewrite_nullable(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _rewrite_nullable(value) for key, value in node.items()}
    if out.pop("nullable", False) is True:
        return {"anyOf": [out, {"type": "null"}]}
    return out


@functools.cache
def spec() -> dict:
    """The spec as parsed YAML, with `nullable` rewritten and the fix-ups below (cached:
    parsing takes ~3 s)."""
    if not SPEC_PATH.is_file():
        raise FileNotFoundError(
            f"{SPEC_PATH} is missing: the OpenAI spec lives in ../shared/testdata beside the repository"
        )
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(SPEC_PATH, "rb") as f:
        document = _rewrite_nullable(yaml.load(f, Loader=loader))
    # NOTE: two things OpenAI's API does (and vLLM) that the completion schema omits: the chunks
    # of a stream carry finish_reason null until the last one (the schema says streamed chunks
    # share the response's shape, whose finish_reason is a string; wire.py checks non-streamed
    # bodies have one), and with `echo` and `logprobs` the first prompt token has no logprob
    # (null in token_logprobs and top_logprobs).
    choice = document["components"]["schemas"]["CreateCompletionResponse"]["properties"][
        "choices"]["items"]["properties"]
    choice["finish_reason"] = {"anyOf": [choice["finish_reason"], {"type": "null"}]}
    logprobs = choice["logprobs"]["anyOf"][0]["properties"]
    logprobs["token_logprobs"]["items"] = {"anyOf": [logprobs["token_logprobs"]["items"],
                                                     {"type": "null"}]}
    logprobs["top_logprobs"]["items"] = {"anyOf": [logprobs["top_logprobs"]["items"],
                                                   {"type": "null"}]}
    return document


@functools.cache
def _registry() -> referencing.Registry:
    resource = referencing.Resource.from_contents(
        spec(), default_specification=referencing.jsonschema.DRAFT202012
    )
    return referencing.Registry().with_resource(_SPEC_URI, resource)


@functools.cache
def validator(name: str) -> jsonschema.Draft202012Validator:
    """A validator for components/schemas/<name>."""
    if name not in spec()["components"]["schemas"]:
        raise KeyError(f"components/schemas/{name} is not in {SPEC_PATH}")
    return jsonschema.Draft202012Validator(
        {"$ref": f"{_SPEC_URI}#/components/schemas/{name}"}, registry=_registry()
    )


def validate(name: str, instance) -> None:
    """Raises AssertionError listing every violation of components/schemas/<name>."""
    errors = sorted(validator(name).iter_errors(instance), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  at /{'/'.join(map(str, e.absolute_path))}: {e.message[:300]}" for e in errors[:10]]
        raise AssertionError(f"response does not match {name}:\n" + "\n".join(lines))


def request_schema(name: str) -> dict:
    """components/schemas/<name> with every $ref inlined (for hypothesis-jsonschema, which does
    not follow references across documents). Recursive references are cut at `depth`."""
    schemas = spec()["components"]["schemas"]

    def inline(node, depth):
        if isinstance(node, list):
            return [inline(item, depth) for item in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            target = node["$ref"].rsplit("/", 1)[-1]
            if depth > 12:
                return {}
            return inline(copy.deepcopy(schemas[target]), depth + 1)
        return {key: inline(value, depth) for key, value in node.items()}

    return inline(schemas[name], 0)
