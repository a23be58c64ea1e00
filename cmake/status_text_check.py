#!/usr/bin/env python3
"""The status text check: fails on code that branches on an error's message text.

An error's message is for people; code that acts on an error tests its code or its kind
(runtime/error_kind.h: HasErrorKind), which travel with it across gRPC. This check reads
every C++ and CUDA source of the project's folders and flags a statement that searches or
compares the text of a status, a gRPC status or an error code:

  x.message().find(...)            also rfind, find_first_of, compare, starts_with,
                                   ends_with, contains; also on std::string(x.message())
  x.message() == "..."             also !=, and with the text on the right
  absl::StrContains(x.message(), ...)   also StartsWith, EndsWith, the IgnoreCase forms,
                                   std::regex_search/regex_match, RE2 matches, HasSubstr
  ... where x.message() may also be x.error_message() (gRPC) or x.ToString().

Assertions in tests (EXPECT_..., ASSERT_...) check the text people read and are not
branches, so a statement that begins with one is not flagged. Comments and the contents of
string literals are ignored. There is no allowlist: no file needs one.

  python3 cmake/status_text_check.py ROOT    check the tree at ROOT; exit 1 naming every hit
  python3 cmake/status_text_check.py --self-test
                                             check that the checker catches each form
"""
import os
import re
import sys
import tempfile

from source_checks import check_main, strip

FOLDERS = ["proto", "codec", "kernels", "runtime", "checkpoint", "ps", "worker", "coordinator",
           "cli", "tests", "bench", "fuzz"]
SOURCES = (".h", ".cc", ".cu", ".cuh")

# The text of an error: a status's message, a gRPC status's, a ToString() of either.
TEXT = r"(?:\.|->)\s*(?:message|error_message|ToString)\s*\(\s*\)"
# What may close around it before the search: std::string(x.message()), (x.message()).
CLOSE = r"(?:\s*\))*"
SEARCH = r"\s*(?:\.|->)\s*(?:r?find|find_\w+|compare|starts_with|ends_with|contains)\s*\("
MATCHERS = (r"(?:StrContains|StartsWith|EndsWith|StrContainsIgnoreCase|StartsWithIgnoreCase|"
            r"EndsWithIgnoreCase|EqualsIgnoreCase|regex_search|regex_match|PartialMatch|"
            r"FullMatch|HasSubstr|ContainsRegex|MatchesRegex)")
PATTERNS = [
    ("searches the message", re.compile(TEXT + CLOSE + SEARCH)),
    ("compares the message", re.compile(TEXT + CLOSE + r"\s*[!=]=")),
    ("compares the message", re.compile(r"[!=]=\s*[\w:.>()\-]*" + TEXT)),
    ("matches the message", re.compile(r"\b" + MATCHERS + r"\s*\([^;{}]*" + TEXT)),
]
ASSERTION = re.compile(r"^\s*(?:EXPECT|ASSERT)_[A-Z_]+\s*\(")


def statements(text):
    """(line, statement) pairs: the stripped text split at ; { and }."""
    start, line = 0, 1
    for m in re.finditer(r"[;{}]", text):
        chunk = text[start:m.start()]
        lead = len(chunk) - len(chunk.lstrip())
        yield line + chunk.count("\n", 0, lead), chunk
        line += chunk.count("\n")
        start = m.end()
    yield line, text[start:]


def check_text(rel, text):
    problems = []
    for line, stmt in statements(strip(text)):
        if ASSERTION.match(stmt):
            continue
        flat = " ".join(stmt.split())
        for why, pattern in PATTERNS:
            if pattern.search(flat):
                problems.append(f"{rel}:{line}: {why} of an error: branch on its code or its "
                                f"kind (runtime/error_kind.h), never its text: {flat[:120]}")
                break
    return problems


def check(root):
    problems = []
    for folder in FOLDERS:
        top = os.path.join(root, folder)
        if not os.path.isdir(top):
            continue
        for dirpath, _, files in os.walk(top):
            for name in sorted(files):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                with open(path, encoding="utf-8", errors="replace") as f:
                    problems += check_text(rel, f.read())
    return problems


def self_test():
    bad = {
        "find": 'if (s.message().find("stale epoch") != std::string::npos) return;',
        "rfind": "bool behind = s.message().rfind(\"is at\", 0) == 0;",
        "wrapped": 'if (std::string(st.message()).find("x") != std::string::npos) {}',
        "grpc": 'if (status.error_message().find("fenced") != std::string::npos) {}',
        "equals": 'if (s.message() == "stale epoch") {}',
        "equals_left": 'if ("stale epoch" != result.status().message()) {}',
        "contains": 'if (absl::StrContains(s.message(), "stale")) {}',
        "starts": "const bool b = absl::StartsWith(\n    s.status().message(), \"x\");",
        "to_string": 'return s.ToString().find("UNAVAILABLE") == 0;',
        "arrow": 'if (p->message().starts_with("x")) {}',
        "regex": "if (std::regex_search(std::string(s.message()), re)) {}",
        "test_branch": 'if (s.message().find("x") != npos) GTEST_SKIP();',
        "after_separator": "int64_t ms = 600'000; if (s.message() == \"x\") {}",
    }
    fine = {
        "assertion": 'EXPECT_NE(s.message().find("term 2"), std::string::npos) << s;',
        "assert_that": "ASSERT_THAT(std::string(s.message()),\n    HasSubstr(\"x\"));",
        "shown": 'spdlog::warn("{}", std::string(s.message()));',
        "wrapped_text": 'return absl::Status(s.code(), absl::StrCat("x: ", s.message()));',
        "comment": '// never: s.message().find("stale epoch")\nint x = 0;',
        "block_comment": '/* s.message() == "x" */ int y = 0;',
        "literal": 'const char* doc = "if (s.message().find(\\"x\\"))";',
        "raw_literal": 'const char* doc = R"(s.message() == "x")";',
        "kind": "if (HasErrorKind(s, ErrorKind::kStaleEpoch)) {}",
        "details": 'if (status.error_details() == "ecps:answered") {}',
        "other_find": 'if (name.find(\'-\') != std::string::npos) {}',
        "lost_message": 'if (life.lost_message().empty()) {}',
        "separator": "const int64_t ms = 600'000;\nstd::string t = s.ToString();",
    }
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "ps"))
        for name, code in list(bad.items()) + list(fine.items()):
            with open(os.path.join(root, "ps", name + ".cc"), "w") as f:
                f.write("void F() {\n" + code + "\n}\n")
        problems = check(root)
        flagged = {p.split(":", 1)[0][len("ps/"):-len(".cc")] for p in problems}
        missed = sorted(set(bad) - flagged)
        wrong = sorted(flagged & set(fine))
        if missed or wrong:
            print("self-test: missed", missed, "flagged", wrong, "\n" + "\n".join(problems))
            return 1
        line = [p for p in problems if p.startswith("ps/starts.cc:")]
        if not line or not line[0].startswith("ps/starts.cc:2:"):
            print("self-test: wrong line for a statement over two lines:", line)
            return 1
    print(f"self-test: {len(bad)} branches on message text caught, {len(fine)} others passed")
    return 0


def main(argv):
    return check_main(argv, __doc__, self_test, check,
                      lambda n: f"{n} branch(es) on an error's message text",
                      "no code branches on an error's message text")

if __name__ == "__main__":
    sys.exit(main(sys.argv))
