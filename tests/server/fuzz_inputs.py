"""Inputs for the fuzz run: JSON Schema-derived request bodies, mutations of valid requests, and
malformed raw HTTP. Everything comes from a seeded random.Random, so a failure is reproducible
from its seed and index.

The schema generator walks a schema with every $ref inlined (openapi.request_schema) and draws a
random instance: anyOf/oneOf pick one branch, objects get their required properties plus a random
subset of the others, numbers and strings respect their bounds most of the time and sit on or past
them some of the time. It is deliberately simple and fast (hypothesis-jsonschema needs ~0.3 s per
CreateCompletionRequest example and does not finish on CreateChatCompletionRequest), since the
point is breadth: thousands of shapes the spec allows, not minimal counterexamples.
"""

import json
import math
import random

_TEXT = "abcxyz XYZ 0129 .,;:!?-_/\\\"'\n\t" + "éßøñ東京語🙂\u200b\u0000\u007f\ufffd"


def random_text(rng: random.Random, max_len: int = 24) -> str:
    return "".join(rng.choice(_TEXT) for _ in range(rng.randint(0, max_len)))


def _bounded_int(rng, schema):
    lo = schema.get("minimum", schema.get("exclusiveMinimum", -5))
    hi = schema.get("maximum", schema.get("exclusiveMaximum", 300))
    lo, hi = int(math.ceil(lo)), int(math.floor(hi))
    roll = rng.random()
    if roll < 0.1:
        return rng.choice([lo, hi, lo - 1, hi + 1, 0, -1, 2 ** 31, 2 ** 63, -2 ** 63])
    return rng.randint(min(lo, hi), max(lo, hi))


def _bounded_number(rng, schema):
    lo = float(schema.get("minimum", schema.get("exclusiveMinimum", -3.0)))
    hi = float(schema.get("maximum", schema.get("exclusiveMaximum", 3.0)))
    if rng.random() < 0.1:
        return rng.choice([lo, hi, lo - 0.001, hi + 0.001, 0.0, -0.0, 1e308, -1e308, 5e-324])
    return rng.uniform(min(lo, hi), max(lo, hi))


def from_schema(schema, rng: random.Random, depth: int = 0):
    """A random instance of `schema` (mostly valid; sometimes on or just past its bounds)."""
    if not isinstance(schema, dict) or depth > 8:
        return None
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return from_schema(rng.choice(schema[key]), rng, depth + 1)
    if "allOf" in schema:
        merged = {"type": "object", "properties": {}, "required": []}
        for part in schema["allOf"]:
            if isinstance(part, dict):
                merged["properties"].update(part.get("properties", {}))
                merged["required"] += part.get("required", [])
        return from_schema(merged, rng, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = rng.choice(kind)
    if kind is None:
        kind = "object" if "properties" in schema else rng.choice(["string", "integer", "object"])
    if kind == "null":
        return None
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "integer":
        return _bounded_int(rng, schema)
    if kind == "number":
        return _bounded_number(rng, schema)
    if kind == "string":
        lo, hi = schema.get("minLength", 0), min(schema.get("maxLength", 40), 40)
        text = random_text(rng, max(lo, hi))
        return text if len(text) >= lo else text + "x" * (lo - len(text))
    if kind == "array":
        lo = schema.get("minItems", 0)
        hi = min(schema.get("maxItems", 5), lo + 5)
        return [from_schema(schema.get("items", {}), rng, depth + 1)
                for _ in range(rng.randint(lo, max(lo, hi)))]
    # object
    props = schema.get("properties", {})
    required = [k for k in schema.get("required", []) if k in props]
    optional = [k for k in props if k not in required]
    chosen = required + rng.sample(optional, rng.randint(0, min(len(optional), 6)))
    out = {key: from_schema(props[key], rng, depth + 1) for key in chosen}
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and not props and rng.random() < 0.7:
        for _ in range(rng.randint(0, 3)):
            out[random_text(rng, 8)] = from_schema(extra, rng, depth + 1)
    return out


WEIRD_VALUES = [
    None, True, False, 0, -1, 1, 2, 2 ** 31, 2 ** 53 + 1, 2 ** 63, -2 ** 63, 2 ** 64, 10 ** 30,
    1e308, -1e308, 5e-324, 0.5, -0.0, "", "x", "0", "1e3", "true", "null", "x" * 20000,
    "🙂" * 500, "\u0000", "\ud83d", [], [None], [[]], {}, {"a": {"b": {"c": {}}}}, [1] * 3000,
    list(range(-3, 3)), [[1, 2], [3]], ["a", 1, None], {"": ""},
]

# Raw-text replacements of a JSON body: literals JSON forbids, or values at C++'s limits.
RAW_LITERALS = [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e999", b"1e-999", b"-0",
                b"99999999999999999999999999", b"0x10", b"01", b"+1", b".5", b"1.", b"1e",
                b"undefined", b"True", b"nul", b'"\\ud800"', b'"\\udfff\\ud800"', b'"\\u0000"',
                b'"\\uZZZZ"', b'"\\x41"', b'"\t"', b"[" * 100000 + b"]" * 100000,
                b"{\"a\":" * 50000 + b"1" + b"}" * 50000, b"[" * 100000]


def mutate(base: dict, rng: random.Random) -> bytes:
    """One mutated copy of a valid request body, as bytes."""
    body = json.loads(json.dumps(base))
    op = rng.randrange(7)
    keys = list(body)
    if op == 0:  # a field with a value of the wrong type or size
        body[rng.choice(keys)] = rng.choice(WEIRD_VALUES)
    elif op == 1:  # a field missing
        del body[rng.choice(keys)]
    elif op == 2:  # an unknown field, or a known field at a nested level
        body[rng.choice(["foo", "", "model ", "PROMPT", "stream_options", "extra_body",
                         random_text(rng, 6)])] = rng.choice(WEIRD_VALUES)
    elif op == 3:  # a JSON literal the grammar forbids, or a number past double / int64
        text = json.dumps(body).encode()
        key = rng.choice(keys).encode()
        at = text.find(b'"' + key + b'": ') + len(key) + 4
        end = at
        depth = 0
        while end < len(text):  # the extent of the old value
            c = text[end:end + 1]
            if c in b"[{":
                depth += 1
            elif c in b"]}":
                if depth == 0:
                    break
                depth -= 1
            elif c == b"," and depth == 0:
                break
            elif c == b'"':
                end = text.index(b'"', end + 1)
                while text[end - 1:end] == b"\\":
                    end = text.index(b'"', end + 1)
            end += 1
        return text[:at] + rng.choice(RAW_LITERALS) + text[end:]
    elif op == 4:  # truncated, or bytes inserted
        text = json.dumps(body).encode()
        cut = rng.randrange(len(text))
        if rng.random() < 0.5:
            return text[:cut]
        return text[:cut] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 4))) + text[cut:]
    elif op == 5:  # duplicate keys, a BOM, a non-object top level
        text = json.dumps(body).encode()
        return rng.choice([b"\xef\xbb\xbf" + text, text[:-1] + b', "model": 5}',
                           b"[" + text + b"]", b'"' + text.replace(b'"', b"'") + b'"', text * 2])
    else:  # unicode in every string
        for key in keys:
            if isinstance(body[key], str):
                body[key] = random_text(rng, 40)
        return json.dumps(body, ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
    return json.dumps(body).encode("utf-8", "surrogatepass")


def raw_http_cases(rng: random.Random, count: int, valid_body: bytes):
    """`count` malformed (and a few valid) HTTP/1.1 request byte strings."""
    ok = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n" % len(valid_body)) + valid_body
    fixed = [
        b"GARBAGE\r\n\r\n", bytes(range(256)), b"\r\n\r\n", b"GET\r\n\r\n", b"GET /\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n", b"GET /health HTTP/1.0\r\n\r\n", b"GET /health HTTP/1.1\r\n\r\n",
        b"get /health http/1.1\r\nHost: x\r\n\r\n", b"GET /health HTTP/1.1\nHost: x\n\n",
        b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\nX: " + b"y" * 200000 + b"\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * 5000 + b"\r\n",
        b"GET /health HTTP/1.1\r\nHost x\r\nno colon here\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: \xff\xfe\x00\r\n\r\n",
        b"GET http://example.com/health HTTP/1.1\r\nHost: x\r\n\r\n",
        b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", b"CONNECT x:443 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /health%00 HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /health?%zz=%%% HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n{}",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n{}",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{}",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n{}\r\n0\r\n\r\n",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n{}",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n{}",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}",
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}",
        ok, ok + ok, ok + b"GARBAGE\r\n\r\n", ok.replace(b"HTTP/1.1", b"HTTP/1.0"),
        ok.replace(b"\r\n", b"\n"), ok.replace(b"Content-Length", b"Content-Length "),
    ]
    cases = list(fixed)
    while len(cases) < count:
        roll = rng.random()
        base = rng.choice(fixed)
        if roll < 0.35:  # a valid request cut anywhere (the socket is then half-closed)
            cases.append(ok[:rng.randrange(1, len(ok))])
        elif roll < 0.6:  # random bytes flipped in a valid request
            b = bytearray(ok)
            for _ in range(rng.randint(1, 5)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            cases.append(bytes(b))
        elif roll < 0.75:  # a lying Content-Length
            n = rng.choice([0, 1, len(valid_body) - 1, len(valid_body) + 1, 2 ** 31, 2 ** 63])
            cases.append(ok.replace(b"Content-Length: %d" % len(valid_body), b"Content-Length: %d" % n))
        elif roll < 0.85:  # random bytes
            cases.append(bytes(rng.randrange(256) for _ in range(rng.randint(1, 300))))
        else:
            cases.append(base[:rng.randrange(1, len(base) + 1)])
    return cases[:count]
