"""--set PATH=VALUE: a value put into a model config document before it is parsed, as batchsweep's
(src/model/override.cpp, src/model/load.cpp). The path is written as the parser's errors name config paths
(`layers[1].repeat`); every check on the value is the parser's own, with the --set named. Standard library only."""

import copy
import json
import math
from dataclasses import dataclass
from typing import Any, Optional

from .errors import ConfigError, UsageError

# A --set argument is a line on a command line; a longer one is a file's worth, which --model reads.
MAX_OVERRIDE_BYTES = 64 << 10
# The largest array index a path takes: no config holds more than 10,000 layers.
MAX_INDEX_DIGITS = 9
# Deepest nesting a value may have (batchsweep's kMaxJsonDepth).
MAX_JSON_DEPTH = 64

EXAMPLE = "e.g. --set input.sequence_length=1024 or --set 'layers[1].repeat=24'"
KEY_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-$")
DIGITS = frozenset("0123456789")
# What starts as JSON does (an object, a list, a quoted string, a number): such a value that does not parse is
# JSON gone wrong, not a bare word.
JSON_STARTS = frozenset("{[\"-+.0123456789")
PYTHON_SPELLINGS = {"True": "true", "False": "false", "None": "null"}


@dataclass(frozen=True)
class ModelOverride:
    text: str  # "path=value", both trimmed: as the report's settings.model_overrides and messages name it
    path: str  # as written: `layers[1].repeat`
    steps: tuple  # a str per key, an int per [N]
    value: Any  # the parsed JSON value (or the bare word as a string)


# ---------------------------------------------------------------------------------------------------------------
# Text shown back
# ---------------------------------------------------------------------------------------------------------------

def _invisible(c: int) -> bool:
    """What a terminal shows as nothing or acts on (batchsweep's is_invisible): C0 and C1 controls, DEL,
    zero-width characters and direction marks, bidirectional embeddings and overrides, the BOM."""
    return (c < 0x20 or 0x7F <= c <= 0x9F or 0x200B <= c <= 0x200F or 0x202A <= c <= 0x202E
            or 0x2066 <= c <= 0x2069 or c == 0xFEFF)


def printable(text: str) -> str:
    """`text` with what a terminal would act on or hide shown as \\x1B (per UTF-8 byte), as batchsweep's
    printable_text; undecodable bytes (surrogate escapes, as in sys.argv) as \\xE9."""
    out = []
    for ch in text:
        c = ord(ch)
        if 0xDC80 <= c <= 0xDCFF:  # a byte that was not UTF-8
            out.append(f"\\x{c - 0xDC00:02X}")
        elif 0xD800 <= c <= 0xDFFF or _invisible(c):
            out.extend(f"\\x{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
        else:
            out.append(ch)
    return "".join(out)


def _utf8_bytes(text: str) -> bytes:
    """The bytes `text` stands for: UTF-8, with each undecodable byte of sys.argv (a surrogate escape, U+DC80..
    U+DCFF) as that byte again, and any other lone surrogate as its three bytes."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return b"".join(bytes([ord(ch) - 0xDC00]) if 0xDC80 <= ord(ch) <= 0xDCFF
                        else ch.encode("utf-8", "surrogatepass") for ch in text)


def _is_utf8(text: str) -> bool:
    """Whether `text` is UTF-8 text: no surrogate escape of a byte that is not UTF-8, nor a lone surrogate."""
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _clip(text: str, limit: int) -> str:
    """The first `limit` UTF-8 bytes of `text`, not splitting a UTF-8 sequence, and "..." where cut (batchsweep's
    clip)."""
    data = _utf8_bytes(text)
    if len(data) <= limit:
        return text
    end = limit
    while end > 0 and data[end] & 0xC0 == 0x80:
        end -= 1
    return data[:end].decode("utf-8", "surrogateescape") + "..."


def _column(text: str, at: int) -> int:
    """The 1-based column of character `at` of a one-line `text`, in UTF-8 bytes, as batchsweep counts them."""
    return len(_utf8_bytes(text[:at])) + 1


def _has_control_characters(text: str) -> bool:
    """C0, DEL and the C1 controls U+0080..U+009F (U+0085 is a line break to some readers, U+009B opens a
    terminal escape)."""
    return any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in text)


def _trim(text: str) -> str:
    return text.strip(" \t")


def _refuse(text: str, message: str):
    raise UsageError(f"--set {printable(text)}: {message}")


# ---------------------------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------------------------

def _parse_path(text: str, path: str) -> tuple:
    def bad(at: int, what: str):
        _refuse(text, f"{printable(path)} is not a config path: {what} at character {at + 1} (keys joined by '.', "
                      f"list elements as [N]: {EXAMPLE[5:]})")

    steps = []
    i, n = 0, len(path)
    while True:
        start = i
        while i < n and path[i] in KEY_CHARACTERS:
            i += 1
        if i == start:
            bad(i, f"'{printable(path[i])}'" if i < n else "a missing key")
        steps.append(path[start:i])
        while i < n and path[i] == "[":
            i += 1
            digits = i
            while i < n and path[i] in DIGITS:
                i += 1
            if i == digits:
                bad(i, "a list index that is not a whole number")
            # [01] would be [1] under another spelling: one path, two names (and "set twice" unseen).
            if path[digits] == "0" and i - digits > 1:
                bad(digits, "a list index with a leading zero")
            if i - digits > MAX_INDEX_DIGITS:
                bad(digits, "a list index too large for any config")
            if i >= n or path[i] != "]":
                bad(i, "a '[' without its ']'")
            steps.append(int(path[digits:i]))
            i += 1
        if i == n:
            return tuple(steps)
        if path[i] != ".":
            bad(i, f"'{printable(path[i])}'")
        i += 1


def _too_deep(text: str, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether brackets outside strings nest deeper than max_depth (counted without parsing)."""
    depth, in_string, escaped = 0, False, False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
            continue
        if c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > max_depth:
                return True
        elif c in "]}" and depth > 0:
            depth -= 1
    return False


def _number_tokens(text: str):
    """(0-based index, token) of each number outside strings in a text that parsed as JSON."""
    i, n, in_string = 0, len(text), False
    while i < n:
        c = text[i]
        if in_string:
            if c == "\\":
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c == "-" or c in DIGITS:
            end = i + 1
            while end < n and (text[end] in DIGITS or text[end] in ".eE+-"):
                end += 1
            yield i, text[i:end]
            i = end
            continue
        i += 1


class _Pairs(list):
    """An object's members in the order written, kept until duplicates are looked for."""


class _NotJson(ValueError):
    def __init__(self, message: str, at: int):
        super().__init__(message)
        self.message, self.at = message, at


class _Constant(ValueError):
    """NaN, Infinity or -Infinity, which Python's json reads and JSON has not."""


def _reject_constant(name: str):
    raise _Constant(name)


def _members(node: Any, path: str, duplicate: list) -> Any:
    """`node` with objects as dicts; the first key given twice in one object, in the order written (as
    batchsweep's DuplicateKeyCheck names it: `a.b`, `[0].x`), appended to `duplicate`."""
    if isinstance(node, _Pairs):
        out = {}
        for key, value in node:
            here = f"{path}.{key}" if path else key
            if key in out:
                if not duplicate:
                    duplicate.append(here)
                continue
            out[key] = _members(value, here, duplicate)
            if duplicate:
                return out
        return out
    if isinstance(node, list):
        out = []
        for i, value in enumerate(node):
            out.append(_members(value, f"{path}[{i}]", duplicate))
            if duplicate:
                break
        return out
    return node


def _syntax_error(value: str, e: ValueError) -> str:
    if isinstance(e, _NotJson):
        return f"line 1, column {e.at + 1}: {e.message}"
    if isinstance(e, json.JSONDecodeError):
        hint = ""
        rest = value[e.pos:]
        if any(rest.lstrip("-").startswith(w) for w in ("NaN", "nan", "Infinity", "inf")):
            hint = " (NaN and Infinity are not JSON numbers)"
        elif rest.startswith("'"):
            hint = " (JSON strings take double quotes)"
        elif any(rest.startswith(w) for w in ("True", "False", "None")):
            hint = " (JSON writes true, false and null, in lower case)"
        elif e.msg == "Extra data" and e.pos > 0 and value[e.pos - 1] == "0" and rest[:1].isdigit() and (
                e.pos == 1 or not value[e.pos - 2].isdigit() and value[e.pos - 2] != "."):
            hint = " (JSON numbers take no leading zero)"
        return f"line {e.lineno}, column {e.colno}: {e.msg}{hint}"
    if isinstance(e, _Constant):
        word = str(e)
        at = value.find(word)
        where = f"line 1, column {at + 1}: " if at >= 0 else ""
        return f"{where}{word} is not a JSON number (NaN and Infinity are not JSON numbers)"
    return str(e)  # e.g. an integer of more digits than Python converts


def _parse_value(text: str, value: str) -> Any:
    # Python's spellings, typed from habit: JSON's are lowercase, and null is no value a config field takes.
    if value in PYTHON_SPELLINGS:
        _refuse(text, f"{value} is Python's; JSON writes {PYTHON_SPELLINGS[value]}")
    if _too_deep(value):
        _refuse(text, f"the value is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        parsed = json.loads(value, object_pairs_hook=_Pairs, parse_constant=_reject_constant)
        # A number beyond a double's range (1e400) is no JSON batchsweep reads; Python would make it inf.
        for at, token in _number_tokens(value):
            if math.isinf(float(token)):
                raise _NotJson(f"the number {token} is beyond a double's range", _column(value, at) - 1)
    except (ValueError, RecursionError) as e:
        # `--set layers[0].out_features=1O24` is a typo, not the name "1O24".
        if value[0] in JSON_STARTS:
            detail = _syntax_error(value, e) if isinstance(e, ValueError) else "nested too deeply"
            _refuse(text, f"{printable(value)} is not a JSON value: {detail}")
        return value  # a bare word: a string (`activation=gelu`)
    duplicate: list = []
    parsed = _members(parsed, "", duplicate)
    if duplicate:
        _refuse(text, f"the value gives {printable(duplicate[0])} twice; JSON keeps only the last, so remove one")
    # A number written non-zero that a double holds only as 0 (1e-400) would be judged as 0.
    for at, token in _number_tokens(value):
        mantissa = token.lower().split("e")[0]
        if "e" in token.lower() and any(d in "123456789" for d in mantissa) and float(token) == 0.0:
            _refuse(text, f"{printable(value)} is not a JSON value: line 1, column {_column(value, at)}: the number "
                          f"{token} is too small for a double (it reads as 0)")
    return parsed


def parse_model_override(text: str) -> ModelOverride:
    """One --set argument, checked. Raises UsageError naming `--set TEXT`."""
    text = _trim(text)
    size = len(_utf8_bytes(text))
    if size > MAX_OVERRIDE_BYTES:
        _refuse(_clip(text, 48), f"is {size} bytes long; a value that large belongs in a model file (--model)")
    # sys.argv holds a byte that is not UTF-8 as a surrogate escape ('\udcff'): no config path or value has one.
    if not _is_utf8(text):
        _refuse(text, "is not UTF-8 text (a byte no character begins with or continues); a config is UTF-8")
    if _has_control_characters(text):
        _refuse(text, "holds a control character (a newline, a tab inside, an escape), which no config path or "
                      "value here needs")
    if "=" not in text:
        _refuse(text, f"expected PATH=VALUE, {EXAMPLE}")
    path, value = (_trim(part) for part in text.split("=", 1))
    if not path:
        _refuse(text, f"no path before '=', {EXAMPLE}")
    if not value:
        _refuse(text, f"no value after '=' (an empty string is written \"\": --set '{printable(path)}=\"\"')")
    steps = _parse_path(text, path)
    return ModelOverride(text=f"{path}={value}", path=path, steps=steps, value=_parse_value(text, value))


# ---------------------------------------------------------------------------------------------------------------
# Applying
# ---------------------------------------------------------------------------------------------------------------

def _kind_of(node: Any) -> str:
    if isinstance(node, dict):
        return "an object"
    if isinstance(node, list):
        return "a list"
    if isinstance(node, str):
        return f"the string {printable(json.dumps(node, ensure_ascii=False))}"
    if isinstance(node, bool):
        return f"the boolean {json.dumps(node)}"
    if node is None:
        return "null"
    return f"the number {json.dumps(node)}"


def apply_model_overrides(doc: Any, overrides: list, source: str) -> None:
    """Sets each override's value in `doc` (a parsed config document), in order. Raises UsageError naming the
    --set: a path given twice, a later --set of a whole that an earlier one set a part of, a step into something
    that is not an object or a list, an index past the end. Nothing is set unless the first two pass."""
    # The same path set twice would keep only the last value, as a key given twice in a config would.
    by_path = {}
    for o in overrides:
        if o.path in by_path:
            _refuse(o.text, f"--set {printable(by_path[o.path].text)} sets {printable(o.path)} too; give each "
                            "path once")
        by_path[o.path] = o
    # A later --set of a list or an object that an earlier one set inside would put the earlier value out of the
    # model while the report still names it: the whole, then its parts, is the order that keeps both.
    for j, outer in enumerate(overrides):
        for inner in overrides[:j]:
            if len(inner.path) > len(outer.path) and inner.path.startswith(outer.path) and \
                    inner.path[len(outer.path)] in ".[":
                _refuse(outer.text, f"it replaces {printable(outer.path)}, inside which --set {printable(inner.text)} "
                                    "came first and would be lost; give the whole first, then its parts")
    # A document that is not an object is the parser's to refuse, naming the file.
    if not isinstance(doc, dict):
        return
    for o in overrides:
        node, walked = doc, ""
        for i, step in enumerate(o.steps):
            last = i + 1 == len(o.steps)
            if isinstance(step, str):
                if not isinstance(node, dict):
                    _refuse(o.text, f"{walked} in {source} is {_kind_of(node)}, which has no key {step}")
                here = f"{walked}.{step}" if walked else step
                if last:
                    node[step] = copy.deepcopy(o.value)
                    break
                if step not in node:
                    # A key the config leaves to its default (`optimizer`) is made, for its own keys to be set; a
                    # list is not, since which element would be meant is unknown.
                    if isinstance(o.steps[i + 1], int):
                        _refuse(o.text, f"{source} has no {here}, so there is no list to take element "
                                        f"[{o.steps[i + 1]}] of")
                    node[step] = {}
                node, walked = node[step], here
            else:
                here = f"{walked}[{step}]"
                if not isinstance(node, list):
                    _refuse(o.text, f"{walked} in {source} is {_kind_of(node)}, not a list")
                if step >= len(node):
                    count = len(node)
                    _refuse(o.text, f"{walked} in {source} is an empty list" if not node else
                            f"{walked} in {source} has {count} element{'' if count == 1 else 's'} ({walked}[0] to "
                            f"{walked}[{count - 1}])")
                if last:
                    node[step] = copy.deepcopy(o.value)
                    break
                node, walked = node[step], here


# ---------------------------------------------------------------------------------------------------------------
# Errors the parser finds in an overridden document
# ---------------------------------------------------------------------------------------------------------------

def on_path(error: str, set_path: str) -> bool:
    """Whether an error at config path `error` is about what --set put at `set_path`: the same place or inside
    it. An error at a layer that holds it may come from elsewhere (a shape an earlier layer changed): not said to
    be this one's."""
    return bool(error) and error.startswith(set_path) and (
        len(error) == len(set_path) or error[len(set_path)] in ".[ ")


def annotate(e: ConfigError, overrides: list) -> ConfigError:
    """The parser's error with the --set it is at or inside named, " (from --set P=V)", or where none is (a shape
    that no longer chains three layers later, an error at a layer that holds the --set's path) every --set,
    " (with --set a=1, --set b=2)": the file alone may be fine."""
    if not overrides:
        return e
    named = [o for o in overrides if on_path(e.path, o.path)]
    listed = ", ".join(f"--set {printable(o.text)}" for o in (named or overrides))
    return ConfigError(e.source, e.path, f"{e.message} ({'from' if named else 'with'} {listed})")


def texts(overrides: Optional[list]) -> list:
    """What settings.model_overrides holds: each --set as "path=value", in order."""
    return [o.text for o in overrides or []]
