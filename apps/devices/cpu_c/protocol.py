"""The timing channel between the judge (apps/devices/evaluator/timing.py) and the confined
harness (harness.py), written once for both sides.

Each order and each reply is one RECORD: a tag, the iteration, a nonce the reply repeats, and
the kernel's status. A timed order (GO or SWAPPED) makes the harness call the reference, reply
REFERENCE, then call the kernels and reply with each one's tag in the order `replies` gives.
With a baseline (the kernel the candidate changed) GO runs the baseline first and SWAPPED the
candidate first; the judge alternates the two (`order_tag`) so that neither always runs on the
caches the other warmed. Before each timed order the judge sends RENEW, untimed: the harness
puts new contents in the timed inputs and replies RENEW with RENEWED, so no timed call sees
the contents an earlier one saw, or with KEPT where a draw would cost more than the calls.
After the last call the judge sends CHECKED: the reply's status is 1 + the iteration of the
first timed call whose output the harness found wrong, 0 for none.
"""

from __future__ import annotations

import struct

RECORD = struct.Struct("<cxxxIQi")  # tag, iteration, nonce, kernel status
GO, SWAPPED, SMALL, LAST, RENEW, CHECKED, QUIT = b"g", b"h", b"s", b"l", b"n", b"k", b"q"  # orders
REFERENCE, CANDIDATE, BASELINE = b"r", b"c", b"b"  # replies to a timed order
KEPT, RENEWED = 0, 1  # the status of a reply to RENEW


def order_tag(iteration: int, with_baseline: bool) -> bytes:
    return SWAPPED if with_baseline and iteration % 2 else GO


def replies(tag: bytes, with_baseline: bool) -> tuple[bytes, ...]:
    """The replies after the reference's to a timed order, in the order the calls run."""
    if not with_baseline:
        return (CANDIDATE,)
    return (BASELINE, CANDIDATE) if tag == GO else (CANDIDATE, BASELINE)
