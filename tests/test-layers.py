# SPDX-License-Identifier: MIT
# tests/test-layers.py: every #include of the tree's C files, checked against the layer table.
#
# The build gives each library only the include folders of the layers below it, so a
# wrong-direction include fails to compile there; this test states the table in one place and
# checks every edge (folder -> folder), tests and programs included, with the file and line of
# each one that the table does not allow. Quoted includes name a header by its bare name
# (as systemd's do), so each name must be unique in the tree.
#
# Usage: test-layers.py SOURCE_ROOT. It first checks itself on a small tree with known faults.

import os
import re
import sys
import tempfile

# Which folders each folder may include from (besides itself). The public header is below
# everything; gpux.h's statuses are the worker's and gpuxd's too. The host back end's CUDA
# dialect (include/gpux/cuda-host) is C++ for modules, and the contract with them
# (gpux_cuda_abi.h) for the host back end and its tests.
PUBLIC = 'include/gpux'
CUDA_HOST = 'include/gpux/cuda-host'
BASIC = {'basic', PUBLIC}
IPC = BASIC | {'ipc'}
WORKER_CORE = IPC | {'worker/core'}
WORKER_COMPILE = WORKER_CORE | {'cudaload', 'worker/compile'}
ALLOWED = {
    PUBLIC: set(),
    CUDA_HOST: set(),
    CUDA_HOST + '/cooperative_groups': set(),
    'basic': set(),
    'ipc': BASIC,
    'admin': IPC,
    'metrics': IPC | {'admin'},
    'cudaload': BASIC,
    'supervisor': IPC,
    'client': IPC,
    'worker/core': IPC,
    'worker/host': WORKER_COMPILE | {CUDA_HOST},
    'worker/compile': WORKER_COMPILE,
    'worker/cuda': WORKER_COMPILE,
    'worker': WORKER_COMPILE | {'worker/host', 'worker/cuda'},
    'tools': IPC | {'admin', 'cudaload'},
    'python/src': {PUBLIC},
    'tests': WORKER_COMPILE | {'worker/host', 'worker/cuda', 'admin', 'supervisor', 'client',
                               CUDA_HOST, 'tests/fake-cuda', 'metrics'},
    'tests/fuzz': WORKER_COMPILE | {'tests'},
    'tests/fake-cuda': set(),
    'tests/headers': {PUBLIC},
    'tests/install': {PUBLIC},
}

# Headers the build writes, and the folder each comes from.
GENERATED = [
    (re.compile(r'host-kernel-prelude\.h$'), PUBLIC),  # include/gpux/host-kernel.h
    (re.compile(r'gpux/version\.h$'), PUBLIC),  # include/gpux/version.h.in
    (re.compile(r'cuda-host-headers\.h$'), PUBLIC),  # include/gpux/cuda-host
    (re.compile(r'kernel-[\w-]+\.h$'), 'tests'),  # tests/kernels
]

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def sources(root):
    """Every C source and header under root, as paths relative to it."""
    for d, dirs, files in os.walk(root):
        # Build trees (meson's), hidden folders and Python's caches hold no source of ours.
        dirs[:] = sorted(x for x in dirs if not x.startswith('.') and x != '__pycache__' and
                         not os.path.isdir(os.path.join(d, x, 'meson-private')))
        for f in sorted(files):
            if f.endswith(('.c', '.h')):
                yield os.path.relpath(os.path.join(d, f), root)


def check(root):
    """The list of faults in the tree at root, each one line."""
    faults = []
    files = list(sources(root))
    by_name = {}
    for f in files:
        if f.endswith('.h'):
            by_name.setdefault(os.path.basename(f), []).append(f)
    for name, where in sorted(by_name.items()):
        if len(where) > 1:
            faults.append('header name %s is not unique: %s' % (name, ', '.join(where)))
    for f in files:
        folder = os.path.dirname(f)
        if folder not in ALLOWED:
            faults.append('%s: folder %s is not in the layer table' % (f, folder))
            continue
        with open(os.path.join(root, f), encoding='utf-8', errors='replace') as src:
            lines = src.read().split('\n')
        for n, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            quoted, name = m.group(1) == '"', m.group(2)
            where = '%s:%d' % (f, n)
            target = None
            if quoted and os.path.isfile(os.path.join(root, folder, name)):
                target = os.path.normpath(os.path.join(folder, name))
                if '/' in name:
                    faults.append('%s: "%s" reaches into another folder by its path; '
                                  'include it by its bare name' % (where, name))
                    continue
            elif quoted and '/' in name:
                faults.append('%s: "%s": include a header by its bare name, found through '
                              'the include folders the build gives' % (where, name))
                continue
            elif quoted and len(by_name.get(name, [])) == 1:
                target = by_name[name][0]
            elif not quoted and os.path.isfile(os.path.join(root, 'include', name)):
                target = os.path.join('include', name)
            else:
                for pat, gen in GENERATED:
                    if pat.search(name):
                        target = os.path.join(gen, os.path.basename(name))
                        break
                if target is None and quoted:
                    faults.append('%s: "%s" is no header of the tree' % (where, name))
                    continue
                if target is None:
                    continue  # a system header
            to = os.path.dirname(target)
            if to != folder and to not in ALLOWED[folder]:
                faults.append('%s: %s -> %s (%s) is not allowed: %s may include from %s'
                              % (where, folder, to, name, folder,
                                 ', '.join(sorted(ALLOWED[folder])) or 'nothing else'))
    return faults


def self_check():
    """The checker finds the faults of a tree made to have them, and no others."""
    tree = {
        'basic/macro.h': '',
        'ipc/proto.h': '#include "macro.h"\n#include <stdint.h>\n#include <gpux/gpux.h>\n',
        'ipc/proto.c': '#include "proto.h"\n#include "wrk.h"\n',
        'ipc/loop.c': '#include "worker/core/wrk.h"\n  # include "nothere.h"\n',
        'include/gpux/gpux.h': '',
        'worker/core/wrk.h': '#include "proto.h"\n',
        'worker/core/proto.h': '',
        'nowhere/x.c': '',
    }
    with tempfile.TemporaryDirectory() as root:
        for path, text in tree.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), 'w') as f:
                f.write(text)
        got = check(root)
    want = [
        'header name proto.h is not unique',
        'ipc/loop.c:1: "worker/core/wrk.h": include a header by its bare name',
        'ipc/loop.c:2: "nothere.h" is no header of the tree',
        'ipc/proto.c:2: ipc -> worker/core (wrk.h) is not allowed',
        'nowhere/x.c: folder nowhere is not in the layer table',
    ]
    missing = [w for w in want if not any(g.startswith(w) for g in got)]
    extra = [g for g in got if not any(g.startswith(w) for w in want)]
    if missing or extra:
        sys.exit('test-layers.py checks itself wrongly:\n  missing %s\n  extra %s'
                 % (missing, extra))


def main():
    if len(sys.argv) != 2:
        sys.exit('usage: test-layers.py SOURCE_ROOT')
    self_check()
    faults = check(sys.argv[1])
    for f in faults:
        print(f)
    if faults:
        sys.exit('%d include(s) against the layers (table in tests/test-layers.py)'
                 % len(faults))
    print('every include follows the layers')


if __name__ == '__main__':
    main()
