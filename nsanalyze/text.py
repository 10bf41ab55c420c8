"""Profile text made safe to show: kernel, NVTX and API names carry what their authors wrote, so
control, bidi and zero-width characters are shown as escapes and code spans cannot be closed by a name.
Shared by the checks (advice text) and the renderers."""

# Characters that reorder or hide text (Trojan Source): bidi embeddings, overrides and isolates, marks,
# zero-width spaces and joiners, the byte-order mark, line and paragraph separators.
INVISIBLE = {c: f"\\u{c:04x}" for c in [0x061c, 0x200b, 0x200c, 0x200d, 0x200e, 0x200f, 0x2028, 0x2029,
                                         *range(0x202a, 0x202f), 0x2060, *range(0x2066, 0x206a), 0xfeff]}
# Lone surrogates: bytes a path or name held that the locale could not decode (Python's surrogateescape
# keeps byte 0xNN as U+DCNN) shown as that byte, \xNN; any other surrogate as its code point. Never written
# as a surrogate: no UTF-8 file or terminal can hold one.
SURROGATES = {c: f"\\x{c - 0xdc00:02x}" if 0xdc80 <= c <= 0xdcff else f"\\u{c:04x}" for c in range(0xd800, 0xe000)}
CONTROL = {**{c: f"\\x{c:02x}" for c in [*range(0x00, 0x20), 0x7f, *range(0x80, 0xa0)]}, **INVISIBLE, **SURROGATES}
# Text of many lines keeps its line breaks and tabs; every other control character (ESC) is an escape too.
CONTROL_BUT_LINES = {c: e for c, e in CONTROL.items() if c not in (0x09, 0x0a)}


def decoded(text: str) -> str:
    """A string read through the locale's codec with surrogateescape (a command-line path under
    LC_ALL=C) as the UTF-8 it was: `pr\\udcc3\\udcbcf` is `prüf`; bytes that are no UTF-8 stay escapes
    (\\xff), other surrogates become \\uNNNN: text any UTF-8 file holds."""
    import re

    text = re.sub("[\udc80-\udcff]+", lambda run: bytes(ord(c) - 0xdc00 for c in run.group(0)).decode(
        "utf-8", "backslashreplace"), text)
    return re.sub("[\ud800-\udfff]", lambda c: f"\\u{ord(c.group(0)):04x}", text)


def decoded_all(value):
    """`decoded` applied to every string in a report model (dicts, lists, tuples)."""
    if isinstance(value, str):
        return decoded(value)
    if isinstance(value, dict):
        return {decoded_all(k): decoded_all(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(decoded_all(v) for v in value)
    return value


def has_surrogates(text) -> bool:
    return any(0xd800 <= ord(c) <= 0xdfff for c in str(text))


def visible(text) -> str:
    """Profile text (kernel, NVTX, API names) for a terminal: control characters (ESC sequences, \\r)
    and characters that reorder or hide text (U+202E, U+200B) shown as escapes, never interpreted."""
    return "" if text is None else str(text).translate(CONTROL)


def show_invisible(text) -> str:
    """Text of many lines (advice, notes, HTML values): control characters (ESC, CR) and bidi and
    zero-width characters shown as escapes, line breaks and tabs kept."""
    return "" if text is None else str(text).translate(CONTROL_BUT_LINES)


def code_span(text) -> str:
    """Profile text inside Markdown the checks write (advice): a code span fenced by more backticks than
    the text holds in a row, on one line, so no name can close it and become a link or markup."""
    import re

    text = visible(text)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or (text.startswith(" ") and text.strip()) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def own_signature_words(signatures) -> dict[str, list[str]]:
    """Per demangled signature of one function, the identifiers of it that not all of them share, in order (the
    namespaces they sit in left out): what tells template instances apart (`vectorized_elementwise_kernel`'s
    MulFunctor from its AddFunctor)."""
    import re

    words = {s: re.findall(r"[A-Za-z_][A-Za-z0-9_]*(?!\w|::)", s) for s in set(signatures)}
    if len(words) < 2:
        return {s: [] for s in words}
    common = set.intersection(*(set(w) for w in words.values()))
    return {s: list(dict.fromkeys(w for w in ws if w not in common)) for s, ws in words.items()}
