"""What the source checks of cmake/ share (code_shape.py, layering.py, status_text_check.py):
the C++ text without comments and literals, and the command line."""


def strip(text, preprocessor=False):
    """The source without comments (and, with `preprocessor`, without preprocessor lines),
    and with every string and char literal emptied, so that nothing inside one can count or
    hide a match; newlines are kept for line numbers."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if preprocessor and line_start and c == "#":
            # A preprocessor line, with its continuations.
            j = i
            while True:
                k = text.find("\n", j)
                if k < 0:
                    k = n
                    break
                if text[k - 1] != "\\":
                    break
                out.append("\n")
                j = k + 1
            i = k
            continue
        if c == "\n":
            line_start = True
            out.append(c)
            i += 1
            continue
        if c in " \t":
            out.append(c)
            i += 1
            continue
        line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "R" and text.startswith('R"', i) and not (i > 0 and (text[i - 1].isalnum()
                                                                       or text[i - 1] == "_")):
            delim_end = text.find("(", i + 2)
            delim = text[i + 2:delim_end]
            j = text.find(")" + delim + '"', delim_end)
            j = n if j < 0 else j + len(delim) + 2
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j
        elif c == "'" and i > 0 and text[i - 1].isalnum() and text[i + 1:i + 2].isalnum():
            out.append(c)  # a digit separator (600'000)
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1 if j < n and text[j] == c else j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def check_main(argv, doc, self_test, check, failure, success):
    """A check's command line: ROOT checks the tree at ROOT and prints every problem, then
    failure(count) and exits 1, or prints `success`; --self-test runs self_test()."""
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2:
        print(doc)
        return 2
    problems = check(argv[1])
    for p in problems:
        print(p)
    if problems:
        print(failure(len(problems)))
        return 1
    print(success)
    return 0
