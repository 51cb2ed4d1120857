"""The --batch grammar of batchsweep (src/sweep/grammar.cpp), with the same limits and error messages:
`64`, `1,8,64`, `8:256:+8` (arithmetic), `1:4096:*2` (geometric), `16:128` (shorthand for `16:128:*2`).
The result is sorted and de-duplicated. `auto` belongs to batchsweep's own search and is refused here."""

import math
import re

from .errors import UsageError

MAX_BATCH = 1 << 24  # largest batch any sweep measures (2^24)
MAX_BATCH_COUNT = 4096  # most batches one --batch list may expand to

_INTEGER = re.compile(r"-?[0-9]+")
_REAL = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|-?(?:inf|infinity)", re.IGNORECASE)


class _Item:
    """Context for error messages: "--batch: '8:2' in '1,8:2': stop 2 is below start 8"."""

    def __init__(self, flag: str, text: str, item: str):
        self.flag, self.text, self.item = flag, text, item

    def fail(self, why: str):
        if self.text.strip() == self.item.strip():
            raise UsageError(f"{self.flag}: '{self.item.strip()}': {why}")
        raise UsageError(f"{self.flag}: '{self.item.strip()}' in '{self.text.strip()}': {why}")


def _parse_integer(token: str, ctx: _Item, what: str, lowest: int, highest: int) -> int:
    token = token.strip()
    if not token:
        ctx.fail(f"the {what} is missing")
    maximum = f"the maximum {what} (2^24)" if what == "batch" else f"the maximum {highest}"
    if _INTEGER.fullmatch(token):
        value = int(token)
        if value < lowest:
            ctx.fail(f"{what} {value} is below the minimum {lowest}")
        if value > highest:
            ctx.fail(f"{what} {token} is above {maximum}")
        return value
    # An integral scientific form ("1e9") is read as a number so that an out-of-range one says how large it is.
    if not _REAL.fullmatch(token):
        ctx.fail(f"{what} '{token}' is not an integer")
    real = float(token)
    if math.isfinite(real) and real != math.floor(real):
        ctx.fail(f"{what} '{token}' is not an integer")
    if real < lowest:
        ctx.fail(f"{what} {token} is below the minimum {lowest}")
    if real > highest:
        ctx.fail(f"{what} {token} is above {maximum}")
    return int(real)


def _check_count(count: int, ctx: _Item):
    if count > MAX_BATCH_COUNT:
        ctx.fail(f"expands to more than {MAX_BATCH_COUNT} batches; use a larger step or `auto`")


def _expand_range(item: str, ctx: _Item, out: list):
    fields = item.split(":")
    if len(fields) > 3:
        ctx.fail("a range is start:stop, start:stop:+step or start:stop:*factor")
    if not fields[0].strip():
        ctx.fail("the range's start is missing (start:stop)")
    if not fields[1].strip():
        ctx.fail("the range's stop is missing (start:stop)")
    start = _parse_integer(fields[0], ctx, "batch", 1, MAX_BATCH)
    stop = _parse_integer(fields[1], ctx, "batch", 1, MAX_BATCH)
    if stop < start:
        ctx.fail(f"stop {stop} is below start {start}")
    geometric, step = True, 2
    if len(fields) == 3:
        spec = fields[2].strip()
        if not spec:
            ctx.fail("the step is missing (write +N or *N)")
        if spec[0] == "+":
            geometric = False
            step = _parse_integer(spec[1:], ctx, "step", 1, MAX_BATCH)
        elif spec[0] == "*":
            step = _parse_integer(spec[1:], ctx, "factor", 2, MAX_BATCH)
        else:
            ctx.fail(f"step '{spec}' must start with + (arithmetic) or * (geometric)")
    if geometric:
        batch, count = start, 0
        while batch <= stop:
            count += 1
            _check_count(count, ctx)
            out.append(batch)
            batch *= step
    else:
        _check_count((stop - start) // step + 1, ctx)
        out.extend(range(start, stop + 1, step))


def parse_batches(text: str, flag: str = "--batch") -> list:
    """The sorted, de-duplicated batches of a --batch value. Raises UsageError naming `flag` and the bad item."""
    if not text.strip():
        raise UsageError(f"{flag}: the batch list is empty")
    batches = []
    for raw in text.split(","):
        ctx = _Item(flag, text, raw)
        item = raw.strip()
        if not item:
            ctx.fail("empty item in the batch list")
        if item == "auto":
            ctx.fail("`auto` is batchsweep's own search; the peer measures explicit batches (e.g. 1:4096:*2)")
        if ":" in item:
            _expand_range(item, ctx, batches)
        else:
            batches.append(_parse_integer(item, ctx, "batch", 1, MAX_BATCH))
        if len(batches) > MAX_BATCH_COUNT:
            batches = sorted(set(batches))
            if len(batches) > MAX_BATCH_COUNT:
                raise UsageError(
                    f"{flag}: '{text.strip()}' expands to more than {MAX_BATCH_COUNT} batches; use larger steps")
    return sorted(set(batches))
