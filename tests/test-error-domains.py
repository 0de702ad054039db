# SPDX-License-Identifier: MIT
# tests/test-error-domains.py: the daemons keep gpux_status and -errno apart, by their types.
#
# In worker/, supervisor/ and cudaload/ a function that returns a status (GPUX_OK or a
# GPUX_E_*) is typed gpux_status, and an int is >= 0 or -errno, never a status: the ranges
# overlap (GPUX_E_INVAL is -1, -EPERM too), so a mix-up compiles and answers a client with
# the wrong status. C converts between an enum and an int without a word, so this reads the
# sources as a small type checker of those two domains, and fails on:
# - a return of one domain from a function typed for the other;
# - an assignment or initialisation of one domain to a variable, parameter or field of the
#   other (every field named `status` holds a status);
# - an argument of one domain where a function's parameter is typed for the other;
# - a comparison of one domain with the other.
# An errno becomes a status through the process's conversion function, typed so (an int in,
# a gpux_status out).
# What it cannot tell (an expression it does not know the domain of) it lets pass.
#
# Usage: test-error-domains.py SOURCE_ROOT. It first checks itself on code with known faults.

import copy
import os
import re
import sys

CHECKED = ('worker', 'supervisor', 'cudaload')
# Headers whose declarations say what the checked code calls (-errno ints, statuses).
DECLARED = CHECKED + ('basic', 'ipc')

STATUS, ERRNO = 'gpux_status', '-errno'
TOKEN = re.compile(r'\s*(?:(?P<id>[A-Za-z_]\w*)|(?P<num>\d\w*)|'
                   r'(?P<op>->|\+\+|--|<<=|>>=|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^]=|\S))')


def strip(text):
    """The text without comments, string or character literals, or preprocessor lines."""
    def lines(m):
        return '\n' * m.group(0).count('\n')
    text = re.sub(r'/\*.*?\*/', lines, text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
    text = re.sub(r"'(?:\\.|[^'\\\n])*'", "''", text)
    return re.sub(r'^[ \t]*#.*?(?<!\\)$', lines, text, flags=re.M | re.S)


def tokens(text):
    out, line, pos = [], 1, 0
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            break
        line += text.count('\n', pos, m.start(m.lastgroup))
        out.append((m.group(m.lastgroup), line))
        line += text.count('\n', m.start(m.lastgroup), m.end())
        pos = m.end()
    return out


def domain_of_type(t):
    """The domain a declared type holds: gpux_status, an int (-errno), or neither."""
    t = ' '.join(t.replace('*', ' * ').split())
    words = [w for w in t.split() if w not in ('static', 'inline', 'const', 'extern',
                                                 'volatile', 'register')]
    ptr = words.count('*')
    base = ' '.join(w for w in words if w != '*')
    if base in ('gpux_status', 'enum gpux_status'):
        return STATUS if ptr == 0 else (STATUS + '*' if ptr == 1 else None)
    if base in ('int', 'ssize_t', 'long'):
        return ERRNO if ptr == 0 else None
    return None


def param_domain(t, name):
    """A parameter's domain: its type's, but one named `status` holds a status (the wire's
    statuses are int32_t)."""
    if name == 'status' and domain_of_type(t) in (ERRNO, None) and '*' not in t:
        return STATUS
    return domain_of_type(t)


def split_params(params):
    """[(type, name)] of a parameter list."""
    out, depth, cur = [], 0, ''
    for ch in params:
        if ch == ',' and depth == 0:
            out.append(cur)
            cur = ''
            continue
        depth += ch in '(['
        depth -= ch in ')]'
        cur += ch
    out.append(cur)
    res = []
    for p in out:
        p = p.strip()
        m = re.match(r'(.*?)(\w+)\s*(\[[^\]]*\])?$', p)
        if not p or p in ('void', '...') or not m or '(' in p:
            res.append((p, None))
        else:
            res.append((m.group(1), m.group(2)))
    return res


DECL = re.compile(r'^((?:static\s+|inline\s+|extern\s+|const\s+)*(?:enum\s+|struct\s+)?\w+'
                  r'[\s*]+?)\s*\b(\w+)\s*\(([^;{]*?)\)\s*(?:__attribute__\(\(.*?\)\)\s*)?'
                  r'([;{])', re.M | re.S)
MEMBER = re.compile(r'^\s*((?:const\s+)?(?:enum\s+|struct\s+)?\w+[\s*]*)\(\s*\*\s*(\w+)\s*\)'
                    r'\s*\(([^;]*?)\)\s*;', re.M | re.S)


class Known:
    """What the declarations of the tree say: functions and members, returns and params."""

    def __init__(self):
        self.ret = {}
        self.params = {}
        self.member_ret = {}
        self.member_params = {}

    def read(self, text, statics=True):
        text = strip(text)
        for m in DECL.finditer(text):
            rtype, name, params = m.group(1), m.group(2), m.group(3)
            if rtype.split()[0] in ('return', 'else', 'goto', 'case', 'do', 'typedef'):
                continue
            if not statics and 'static' in rtype.split():
                continue
            self.ret[name] = domain_of_type(rtype)
            self.params[name] = [param_domain(t, n) for t, n in split_params(params)]
        for m in MEMBER.finditer(text):
            self.member_ret[m.group(2)] = domain_of_type(m.group(1))
            self.member_params[m.group(2)] = [param_domain(t, n)
                                              for t, n in split_params(m.group(3))]


def match_close(toks, i):
    """The index of the bracket closing toks[i]."""
    depth = 0
    for j in range(i, len(toks)):
        t = toks[j][0]
        if t in ('(', '[', '{'):
            depth += 1
        elif t in (')', ']', '}'):
            depth -= 1
            if depth == 0:
                return j
    return len(toks) - 1


def split_top(toks, seps):
    """Split a token list at the separators found outside brackets."""
    parts, cur, depth = [], [], 0
    for t in toks:
        if t[0] in '([{':
            depth += 1
        elif t[0] in ')]}':
            depth -= 1
        if depth == 0 and t[0] in seps:
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    parts.append(cur)
    return parts


class Checker:
    def __init__(self, known, path):
        self.known = known
        self.path = path
        self.faults = []

    def fault(self, line, text):
        self.faults.append('%s:%d: %s' % (self.path, line, text))

    def domains(self, toks, env):
        """The set of domains an expression may have (empty: none known, or a truth value)."""
        if not toks:
            return set()
        # A ternary: its branches' domains.
        parts = split_top(toks, {'?'})
        if len(parts) > 1:
            rest = split_top(sum(parts[1:], []), {':'})
            out = set()
            for p in rest:
                out |= self.domains(p, env)
            return out
        # A truth value, an assignment within, a comma: nothing to say here.
        depth = 0
        for t, _ in toks:
            if t in '([{':
                depth += 1
            elif t in ')]}':
                depth -= 1
            elif depth == 0 and t in ('==', '!=', '<', '>', '<=', '>=', '&&', '||', '!', '=',
                                      ','):
                return set()
        out = set()
        i = 0
        while i < len(toks):
            t = toks[i][0]
            nxt = toks[i + 1][0] if i + 1 < len(toks) else None
            prev = toks[i - 1][0] if i > 0 else None
            if t == '(':
                j = match_close(toks, i)
                inner = toks[i + 1:j]
                # A cast changes no domain: (int)GPUX_E_INVAL is still a status.
                if not (inner and all(x[0] in ('int', 'gpux_status', 'int32_t', 'uint32_t',
                                               'unsigned', 'long', '*', 'enum')
                                      for x in inner)):
                    out |= self.domains(inner, env)
                i = j + 1
                continue
            if re.match(r'[A-Za-z_]', t):
                if nxt == '(':
                    j = match_close(toks, i + 1)
                    if prev in ('->', '.'):
                        d = self.known.member_ret.get(t)
                    else:
                        d = self.known.ret.get(t)
                    if d in (STATUS, ERRNO):
                        out.add(d)
                    i = j + 1
                    continue
                if re.match(r'GPUX_(E_\w+|OK)$', t):
                    out.add(STATUS)
                elif t == 'status' and prev in ('->', '.'):
                    out.add(STATUS)
                elif re.match(r'E[A-Z0-9]+$', t) and prev == '-':
                    out.add(ERRNO)
                elif t == 'errno' and prev == '-':
                    out.add(ERRNO)
                elif prev not in ('->', '.') and env.get(t) in (STATUS, ERRNO):
                    if nxt not in ('->', '.', '['):
                        out.add(env[t])
                elif prev == '*' and env.get(t) == STATUS + '*':
                    out.add(STATUS)
            i += 1
        return out

    def lvalue_domain(self, toks, env):
        """The domain of what is assigned to: a variable, *pointer, or a status field."""
        names = [t for t, _ in toks]
        if not names:
            return None
        if len(names) >= 2 and names[-1] == 'status' and names[-2] in ('->', '.'):
            return STATUS
        if len(names) == 1:
            d = env.get(names[0])
            return d if d in (STATUS, ERRNO) else None
        if len(names) == 2 and names[0] == '*' and env.get(names[1]) == STATUS + '*':
            return STATUS
        return None

    def mixed(self, want, got):
        return (want == STATUS and ERRNO in got) or (want == ERRNO and STATUS in got)

    def function(self, rtype, name, params, body, env_global):
        env = dict(env_global)
        for t, n in params:
            if n:
                env[n] = param_domain(t, n)
        want = domain_of_type(rtype)
        # Declarations of locals: `int a, b = x;`, `gpux_status st;`.
        conflicts = set()
        for i, (t, _) in enumerate(body):
            if t in ('int', 'gpux_status', 'ssize_t') and (i == 0 or body[i - 1][0] in
                                                              (';', '{', '}', '(', 'const')):
                j = i + 1
                depth = 0
                expect_name = True
                while j < len(body):
                    tj = body[j][0]
                    if tj in '([{':
                        depth += 1
                    elif tj in ')]}':
                        if depth == 0:
                            break
                        depth -= 1
                    elif depth == 0 and tj == ';':
                        break
                    elif depth == 0 and tj == ',':
                        expect_name = True
                    elif depth == 0 and expect_name and re.match(r'[A-Za-z_]\w*$', tj):
                        ptr = body[j - 1][0] == '*'
                        d = domain_of_type(t + (' *' if ptr else ''))
                        if tj in env and env[tj] != d and tj not in [p[1] for p in params]:
                            conflicts.add(tj)
                        env[tj] = d
                        expect_name = False
                    j += 1
        for n in conflicts:
            env[n] = None
        self.statements(body, env, want, name)

    def statements(self, body, env, want, fname):
        i = 0
        n = len(body)
        while i < n:
            t, line = body[i]
            if t == 'return':
                j = i + 1
                while j < n and body[j][0] != ';':
                    j = match_close(body, j) + 1 if body[j][0] in '([{' else j + 1
                got = self.domains(body[i + 1:j], env)
                if self.mixed(want, got):
                    self.fault(line, '%s() returns %s but is typed %s'
                               % (fname, '/'.join(sorted(got)), want))
                self.statements(body[i + 1:j], env, want, fname)
                i = j + 1
                continue
            if t == '=':
                # The lvalue: back to the start of the statement or declarator.
                k = i - 1
                depth = 0
                while k >= 0:
                    tk = body[k][0]
                    if tk in ')]':
                        depth += 1
                    elif tk in '([':
                        if depth == 0:
                            break
                        depth -= 1
                    elif depth == 0 and tk in (';', '{', '}', ',', 'int', 'gpux_status',
                                               '?', ':', 'return'):
                        break
                    k -= 1
                lhs = body[k + 1:i]
                j = i + 1
                depth = 0
                while j < n:
                    tj = body[j][0]
                    if tj in '([{':
                        depth += 1
                    elif tj in ')]}':
                        if depth == 0:
                            break
                        depth -= 1
                    elif depth == 0 and tj in (';', ','):
                        break
                    j += 1
                dl = self.lvalue_domain(lhs, env)
                got = self.domains(body[i + 1:j], env)
                if self.mixed(dl, got):
                    self.fault(line, '%s (%s) is given %s'
                               % (' '.join(x[0] for x in lhs), dl, '/'.join(sorted(got))))
                i += 1
                continue
            if t in ('==', '!='):
                k = i - 1
                depth = 0
                while k >= 0:
                    tk = body[k][0]
                    if tk in ')]':
                        depth += 1
                    elif tk in '([':
                        if depth == 0:
                            break
                        depth -= 1
                    elif depth == 0 and tk in (';', '{', '}', ',', '&&', '||', '?', ':',
                                               'return', '=', '!'):
                        break
                    k -= 1
                j = i + 1
                depth = 0
                while j < n:
                    tj = body[j][0]
                    if tj in '([{':
                        depth += 1
                    elif tj in ')]}':
                        if depth == 0:
                            break
                        depth -= 1
                    elif depth == 0 and tj in (';', ',', '&&', '||', '?', ':', ')'):
                        break
                    j += 1
                a = self.domains(body[k + 1:i], env)
                b = self.domains(body[i + 1:j], env)
                if len(a) == 1 and len(b) == 1 and a != b:
                    self.fault(line, 'a comparison of %s with %s' % (a.pop(), b.pop()))
            if re.match(r'[A-Za-z_]\w*$', t) and i + 1 < n and body[i + 1][0] == '(':
                prev = body[i - 1][0] if i > 0 else None
                if prev in ('->', '.'):
                    pdoms = self.known.member_params.get(t)
                else:
                    pdoms = self.known.params.get(t)
                if pdoms:
                    j = match_close(body, i + 1)
                    args = split_top(body[i + 2:j], {','})
                    for k, a in enumerate(args):
                        if k < len(pdoms):
                            got = self.domains(a, env)
                            if self.mixed(pdoms[k], got):
                                self.fault(line, 'argument %d of %s() is %s, typed %s'
                                           % (k + 1, t, '/'.join(sorted(got)), pdoms[k]))
            i += 1

    def file(self, text):
        toks = tokens(strip(text))
        i = 0
        # Top-level function definitions: TYPE NAME ( PARAMS ) { BODY }
        while i < len(toks):
            t = toks[i][0]
            if t in '({[':
                j = match_close(toks, i)
                if t == '(' and j + 1 < len(toks) and toks[j + 1][0] == '{' and i > 0 and \
                        re.match(r'[A-Za-z_]\w*$', toks[i - 1][0]):
                    name = toks[i - 1][0]
                    k = i - 2
                    while k >= 0 and toks[k][0] not in (';', '}', ')'):
                        k -= 1
                    rtype = ' '.join(x[0] for x in toks[k + 1:i - 1])
                    params = split_params(' '.join(x[0] for x in toks[i + 1:j]))
                    end = match_close(toks, j + 1)
                    self.function(rtype, name, params, toks[j + 2:end], {})
                    i = end + 1
                    continue
                i = j + 1
                continue
            i += 1


def sources(root, folders):
    for top in folders:
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for f in sorted(files):
                if f.endswith(('.c', '.h')):
                    yield os.path.join(d, f)


def check(root):
    known = Known()
    for f in sources(root, DECLARED):
        with open(f, encoding='utf-8') as src:
            known.read(src.read(), statics=False)
    faults = []
    for f in sources(root, CHECKED):
        if not f.endswith('.c'):
            continue
        with open(f, encoding='utf-8') as src:
            text = src.read()
        mine = copy.deepcopy(known)
        mine.read(text)
        c = Checker(mine, os.path.relpath(f, root))
        c.file(text)
        faults += c.faults
    return faults


SELF_CHECK = {
    'worker/a.h': '''
int errno_fn(int x);
gpux_status status_fn(int x, gpux_status st);
gpux_status wrk_status_from_errno(int err);
struct ops {
	gpux_status (*open)(void *dev, char **ret_msg);
};
''',
    'worker/a.c': '''
static int bad_return(void)
{
	return (int)GPUX_E_INVAL;
}
static gpux_status bad_errno(int fd)
{
	if (fd < 0)
		return -errno;
	return -EINVAL;
}
static gpux_status good(struct ops *o, gpux_status *ret_st, char **msg)
{
	int r = errno_fn(1);
	gpux_status st = GPUX_OK;

	if (r < 0)
		return wrk_status_from_errno(r);
	st = o->open(NULL, msg);
	*ret_st = st == GPUX_OK ? GPUX_E_NOMEM : st;
	return r == -ENOMEM ? GPUX_E_NOMEM : status_fn(r, st);
}
static int bad_mix(struct ops *o, gpux_status *ret_st, struct wrk_req *q)
{
	int r = o->open(NULL, NULL);
	gpux_status st = errno_fn(2);

	*ret_st = -ENOMEM;
	q->status = r;
	st = status_fn(GPUX_E_INVAL, -EPERM);
	if (r == GPUX_E_NOMEM)
		return 0;
	return r < 0 ? r : st;
}
''',
}
SELF_FAULTS = [
    'worker/a.c:4: bad_return() returns gpux_status but is typed -errno',
    'worker/a.c:9: bad_errno() returns -errno but is typed gpux_status',
    'worker/a.c:10: bad_errno() returns -errno but is typed gpux_status',
    'worker/a.c:25: r (-errno) is given gpux_status',
    'worker/a.c:26: st (gpux_status) is given -errno',
    'worker/a.c:28: * ret_st (gpux_status) is given -errno',
    'worker/a.c:29: q -> status (gpux_status) is given -errno',
    'worker/a.c:30: argument 1 of status_fn() is gpux_status, typed -errno',
    'worker/a.c:30: argument 2 of status_fn() is -errno, typed gpux_status',
    'worker/a.c:31: a comparison of -errno with gpux_status',
    'worker/a.c:33: bad_mix() returns -errno/gpux_status but is typed -errno',
]


def self_check():
    import tempfile
    with tempfile.TemporaryDirectory() as root:
        for path, text in SELF_CHECK.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), 'w') as f:
                f.write(text)
        got = check(root)
    if got != SELF_FAULTS:
        sys.exit('test-error-domains.py checks itself wrongly:\n  got:\n    %s\n  want:\n    %s'
                 % ('\n    '.join(got), '\n    '.join(SELF_FAULTS)))


def main():
    if len(sys.argv) != 2:
        sys.exit('usage: test-error-domains.py SOURCE_ROOT')
    self_check()
    faults = check(sys.argv[1])
    for f in faults:
        print(f)
    if faults:
        sys.exit('%d mix(es) of gpux_status and -errno (see tests/test-error-domains.py)'
                 % len(faults))
    print('gpux_status and -errno are kept apart')


if __name__ == '__main__':
    main()
