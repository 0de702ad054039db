#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# tests/headers/test-abi.py: libgpuxclient's exports, its version script and gpux.h agree.
# Every function gpux.h declares GPUX_EXPORT is in the map and exported, in the map's version
# block; every name in the map is declared and exported; the library exports nothing else.
# Usage: test-abi.py READELF LIBRARY MAP GPUX_H
import re
import subprocess
import sys

readelf, library, map_path, header = sys.argv[1:5]
failures = []


def check(what, ok):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def without_comments(text):
    return re.sub(r"/\*.*?\*/", " ", text, flags=re.S)


# The map: blocks "GPUX_0.1 { global: a; b; local: *; };" and "GPUX_0.2 { ... } GPUX_0.1;".
mapped = {}
text = without_comments(open(map_path).read())
blocks = re.findall(r"(\w[\w.]*)\s*\{(.*?)\}\s*[\w.]*\s*;", text, flags=re.S)
versions = set(v for v, _ in blocks)
check("%s: has version blocks" % map_path, len(blocks) > 0)
for version, body in blocks:
    scope = None
    for item in body.split(";"):
        item = item.strip()
        m = re.match(r"(global|local)\s*:\s*(.*)", item, flags=re.S)
        if m:
            scope, item = m.group(1), m.group(2).strip()
        if not item:
            continue
        if scope == "local":
            check("%s: %s's local part is '*' alone" % (map_path, version), item == "*")
            continue
        check("%s: %s named once in the map" % (map_path, item), item not in mapped)
        mapped[item] = version

# The header: "GPUX_EXPORT type name(" declarations (the macro's own #define left out).
text = without_comments(open(header).read())
text = re.sub(r"^\s*#.*$", " ", text, flags=re.M)
declared = set(re.findall(r"\bGPUX_EXPORT\b[^;{}()]*?\b(\w+)\s*\(", text))
check("%s: declares GPUX_EXPORT functions" % header, len(declared) > 0)

# The library's dynamic symbols defined in it: name@@version (or name@version), type.
out = subprocess.run([readelf, "--dyn-syms", "--wide", library], capture_output=True,
                     text=True, check=True).stdout
exported = {}
for line in out.splitlines():
    f = line.split()
    # Num: Value Size Type Bind Vis Ndx Name
    if len(f) < 8 or not f[0][:-1].isdigit() or f[6] == "UND" or f[4] == "LOCAL":
        continue
    name, _, version = f[7].replace("@@", "@").partition("@")
    if f[6] == "ABS" and not version and name in versions:
        continue  # a version node's own symbol (GPUX_0.1)
    exported[name] = (version, f[3])
check("%s: exports symbols" % library, len(exported) > 0)

for name in sorted(declared):
    check("%s: declared GPUX_EXPORT, is in the map" % name, name in mapped)
    check("%s: declared GPUX_EXPORT, is exported" % name, name in exported)
for name in sorted(mapped):
    check("%s: in the map, is declared GPUX_EXPORT in gpux.h" % name, name in declared)
    check("%s: in the map, is exported" % name, name in exported)
for name in sorted(exported):
    version, kind = exported[name]
    check("%s: exported, is declared GPUX_EXPORT in gpux.h" % name, name in declared)
    check("%s: exported, is in the map" % name, name in mapped)
    if name in mapped:
        check("%s: exported in %s, the map's block" % (name, mapped[name]),
              version == mapped[name])
    check("%s: exported as a function" % name, kind == "FUNC")

if failures:
    print("%d failed: the exports, %s and %s disagree" % (len(failures), map_path, header))
    sys.exit(1)
