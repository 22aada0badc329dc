"""How stored text is shown to people — by the CLI (`jobs_core.cli.base.literal`, its log lines)
and on the dashboard's pages alike: every character a terminal would act on, or a page would
show as nothing or reorder, is spelled as its escape (`\\x1b`, `\\u202e`), so what is shown is
what is stored, visibly, and never acts.
"""

from __future__ import annotations

import re
from typing import Final

#: What a terminal would act on or a value cannot show as itself: C0 and C1 controls (ESC
#: starts a terminal escape), DEL, lone surrogates (not UTF-8: printing one raises), bidi
#: overrides and isolates (they reorder what is shown: `\u202egnp.exe` reads as `exe.png`),
#: line and paragraph separators. Newline and tab are kept in a block (a traceback, JSON).
UNSAFE: Final = "\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u202a-\u202e\u2066-\u2069"
BLOCK_UNSAFE: Final = re.compile(f"[{UNSAFE}]")
#: The same, plus newline and tab, for a value that must stay on one line (an id, a name).
LINE_UNSAFE: Final = re.compile(f"[\n\t{UNSAFE}]")
_SHORT: Final = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def escape_char(m: re.Match[str]) -> str:
    """One matched character as its escape: `\\n`, `\\x1b`, `\\u202e`."""
    c = m.group()
    code = ord(c)
    return _SHORT.get(c) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def spelled(value: object, *, line: bool = True) -> str:
    """`value` as text with each character `LINE_UNSAFE` (with `line`) or `BLOCK_UNSAFE`
    (without: newlines and tabs kept) lists spelled as its escape."""
    return (LINE_UNSAFE if line else BLOCK_UNSAFE).sub(escape_char, str(value))
