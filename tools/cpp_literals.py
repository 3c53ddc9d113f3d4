"""tools/cpp_literals.py: the C++ string literals of a source file, outside comments.

Shared by tools/check-algorithm-names and tools/check-trainer-names, which report a literal that names
an algorithm, a trainer kind, a stage kind or a metric where the code should ask what it declares.
"""
import re

STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def code_of(line, in_block):
    """The line without its comments (// and /* */), and whether a block comment is still open."""
    out, i = "", 0
    while i < len(line):
        if in_block:
            end = line.find("*/", i)
            if end < 0:
                return out, True
            i, in_block = end + 2, False
            continue
        if line[i] == '"':  # a string: copied whole, so that "//" inside it is no comment
            m = STRING.match(line, i)
            if m:
                out += m.group(0)
                i = m.end()
                continue
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            in_block, i = True, i + 2
            continue
        out += line[i]
        i += 1
    return out, in_block


def literals(path):
    """(line number, the line, its code without comments, the literal's text) for every string literal."""
    in_block = False
    with open(path, errors="replace") as f:
        for n, line in enumerate(f, 1):
            code, in_block = code_of(line, in_block)
            for m in STRING.finditer(code):
                yield n, line, code, m.group(1)
