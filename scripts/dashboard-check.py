#!/usr/bin/env python3
"""dashboard-check: the Grafana dashboard conf/outboxd-dashboard.json is
importable as-is, every PromQL expression in it parses, and it names only
metrics (and labels) outboxd exports.

Usage: dashboard-check.py [--metrics SCRAPE] [--self-test] [DASHBOARD]

  DASHBOARD        default conf/outboxd-dashboard.json
  --metrics FILE   take the exported metrics from a /metrics scrape: names,
                   label names and label values are then all checked;
                   without it the names come from daemon/metrics.c
  --self-test      also break a copy of the dashboard in each way this
                   check must catch, and fail unless it catches every one

Expressions are checked by promtool (`promtool check rules` on a rules file
holding each one, Grafana's variables replaced by valid values). Exit 0
when all is well, 1 naming every bad panel, expression or metric, 64 on
bad usage.
"""
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH = 24

# What each Grafana variable stands for when promtool parses: a regex for
# the outbox selection, a duration for the intervals.
VARIABLE_VALUES = {
    "outbox": ".+",
    "__rate_interval": "5m",
    "__interval": "1m",
    "__range": "1h",
    "__interval_ms": "60000",
    "__range_s": "3600",
    "__range_ms": "3600000",
}
VARIABLE_RE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]|\$(\w+)")

# PromQL words that are neither metric names nor functions.
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on",
            "ignoring", "group_left", "group_right", "atan2", "inf", "nan"}
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
                "count_values", "bottomk", "topk", "quantile"}
LABEL_LIST_KEYWORDS = {"by", "without", "on", "ignoring", "group_left",
                       "group_right"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

TOKEN_RE = re.compile(r"""
    (?P<space>\s+)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<var>\$\{[^}]*\}|\$\w+|\[\[[^\]]*\]\])
  | (?P<duration>(?:\d+(?:ms|[smhdwy]))+\b)
  | (?P<number>0x[0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=,(){}\[\]@])
""", re.VERBOSE)


class Exported:
    """The series outboxd exports: name -> {label: set of values}, plus
    the histogram families (whose series are name_bucket/_sum/_count)."""

    def __init__(self, origin):
        self.origin = origin
        self.series = {}
        self.histograms = set()
        self.knows_labels = False

    @classmethod
    def from_source(cls, path):
        text = open(path, encoding="utf-8").read()
        ex = cls(os.path.relpath(path, ROOT))
        ex.histograms = set(re.findall(r'"(outboxd_\w+)",\s*"histogram"', text))
        for name in set(re.findall(r'"(outboxd_[a-z0-9_]+)"', text)):
            ex._add_family(name)
        return ex

    @classmethod
    def from_scrape(cls, path):
        ex = cls(path)
        ex.knows_labels = True
        sample = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s')
        for line in open(path, encoding="utf-8"):
            m = re.match(r"#\s*TYPE\s+(\S+)\s+(\S+)", line)
            if m:
                if m.group(2) == "histogram":
                    ex.histograms.add(m.group(1))
                ex._add_family(m.group(1))
                continue
            m = sample.match(line)
            if m and not line.startswith("#"):
                labels = ex.series.setdefault(m.group(1), {})
                for k, v in re.findall(r'(\w+)="((?:\\.|[^"\\])*)"', m.group(2) or ""):
                    labels.setdefault(k, set()).add(v)
        return ex

    def _add_family(self, name):
        if name in self.histograms:
            for suffix in HISTOGRAM_SUFFIXES:
                self.series.setdefault(name + suffix, {})
        else:
            self.series.setdefault(name, {})


def tokenize(expr):
    """PromQL tokens as (kind, text); raises ValueError on a character
    no PromQL token starts with (promtool then says more)."""
    tokens, pos = [], 0
    while pos < len(expr):
        m = TOKEN_RE.match(expr, pos)
        if not m:
            raise ValueError("unexpected %r at offset %d" % (expr[pos], pos))
        if m.lastgroup != "space":
            tokens.append((m.lastgroup, m.group()))
        pos = m.end()
    return tokens


def unquote(s):
    return re.sub(r"\\(.)", r"\1", s[1:-1])


def parse_matchers(tokens, i):
    """The label matchers of the selector whose '{' is tokens[i]: a list
    of (label, op, value) and the index after the '}'."""
    matchers, i = [], i + 1
    while i < len(tokens) and tokens[i][1] != "}":
        if tokens[i][1] == ",":
            i += 1
            continue
        if i + 2 >= len(tokens) or tokens[i + 2][0] != "string":
            return matchers, len(tokens)
        matchers.append((tokens[i][1], tokens[i + 1][1], unquote(tokens[i + 2][1])))
        i += 3
    return matchers, i + 1


def skip_to(tokens, i, close):
    while i < len(tokens) and tokens[i][1] != close:
        i += 1
    return i + 1


def analyse(expr):
    """What an expression selects: a list of (metric, matchers) and the
    labels it groups or matches by."""
    tokens = tokenize(expr)
    selectors, grouping, i = [], set(), 0
    while i < len(tokens):
        kind, text = tokens[i]
        nxt = tokens[i + 1][1] if i + 1 < len(tokens) else None
        if text == "[":
            i = skip_to(tokens, i, "]")
        elif kind == "ident" and text.lower() in LABEL_LIST_KEYWORDS and nxt == "(":
            j = skip_to(tokens, i + 2, ")")
            grouping.update(t for k, t in tokens[i + 2:j - 1] if k == "ident")
            i = j
        elif text == "{":
            matchers, i = parse_matchers(tokens, i)
            selectors.append((None, matchers))
        elif kind == "ident" and text in AGGREGATIONS and nxt in ("by", "without"):
            i += 1
        elif kind == "ident" and nxt != "(" and text.lower() not in KEYWORDS:
            matchers, i = ([], i + 1) if nxt != "{" else parse_matchers(tokens, i + 1)
            selectors.append((text, matchers))
        else:
            i += 1
    return selectors, grouping


def substitute(expr, known_vars):
    """The expression with Grafana's variables replaced, and the names of
    any variable the dashboard does not define."""
    unknown = []

    def value(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in VARIABLE_VALUES or (not name.startswith("__") and name not in known_vars):
            unknown.append(name)
            return "x"
        return VARIABLE_VALUES[name]

    return VARIABLE_RE.sub(value, expr), unknown


class Checker:
    def __init__(self, dashboard, exported, where):
        self.d = dashboard
        self.ex = exported
        self.where = where
        self.errors = []
        self.exprs = []  # (what, expr as written, expr substituted)

    def err(self, msg):
        self.errors.append("%s: %s" % (self.where, msg))

    def run(self, promtool=True):
        if not isinstance(self.d, dict) or not isinstance(self.d.get("panels"), list):
            self.err("not a Grafana dashboard (no panels list)")
            return self.errors
        self.check_top()
        variables = self.check_templating()
        panels = self.check_panels()
        self.check_layout(self.d["panels"])
        for what, expr in self.collect(panels, variables):
            self.check_expr(what, expr, variables)
        if promtool and self.exprs:
            self.promtool()
        return self.errors

    def check_top(self):
        if self.d.get("id") is not None:
            self.err('"id" must be null, so that an import creates the dashboard')
        if not self.d.get("uid") or not self.d.get("title"):
            self.err('the dashboard needs a "uid" and a "title"')
        v = self.d.get("schemaVersion")
        if not isinstance(v, int) or not 36 <= v <= 39:
            self.err("schemaVersion %r is not one of Grafana 9 or 10 (36 to 39)" % v)

    def check_templating(self):
        found = {}
        for v in self.d.get("templating", {}).get("list", []):
            found[v.get("name")] = v
        ds = found.get("datasource")
        if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
            self.err('no template variable "datasource" of type datasource, query prometheus')
        ob = found.get("outbox")
        if not ob or ob.get("type") != "query":
            self.err('no template variable "outbox" of type query')
        else:
            if not (ob.get("multi") and ob.get("includeAll")):
                self.err('variable "outbox" must be multi-select with All')
            if ob.get("datasource") != DATASOURCE:
                self.err('variable "outbox" must query the data source ${datasource}')
            if not re.fullmatch(r"label_values\(\s*\w+.*,\s*outbox\s*\)",
                                variable_query(ob).strip()):
                self.err('variable "outbox" must be label_values(<metric>, outbox)')
        return found

    def check_panels(self):
        """Every panel, rows' children too; ids unique; every panel that
        queries uses the datasource variable."""
        seen, flat = {}, []
        for p in self.d["panels"]:
            flat.append(p)
            flat.extend(p.get("panels", []) if p.get("type") == "row" else [])
        for p in flat:
            name = panel_name(p)
            pid = p.get("id")
            if not isinstance(pid, int) or isinstance(pid, bool):
                self.err("%s: id %r is not an integer" % (name, pid))
            elif pid in seen:
                self.err("%s: duplicate panel id %d (also %s)" % (name, pid, panel_name(seen[pid])))
            else:
                seen[pid] = p
            if p.get("type") != "row":
                self.check_panel_queries(p, name)
        return flat

    def check_panel_queries(self, p, name):
        if p.get("datasource") != DATASOURCE:
            self.err("%s: datasource %s, not the variable %s"
                     % (name, json.dumps(p.get("datasource")), json.dumps(DATASOURCE)))
        targets = p.get("targets") or []
        if not targets:
            self.err("%s: no targets" % name)
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs) or None in refs:
            self.err("%s: refIds %r are not unique" % (name, refs))
        for t in targets:
            if "datasource" in t and t["datasource"] != DATASOURCE:
                self.err("%s target %s: datasource %s, not the variable"
                         % (name, t.get("refId"), json.dumps(t["datasource"])))
            if not str(t.get("expr", "")).strip():
                self.err("%s target %s: no expr" % (name, t.get("refId")))

    def check_layout(self, panels, context="dashboard"):
        """gridPos inside the 24 columns and no two panels overlapping;
        a collapsed row's panels are laid out on their own."""
        boxes = []
        for p in panels:
            g, name = p.get("gridPos") or {}, panel_name(p)
            if not all(isinstance(g.get(k), int) for k in ("h", "w", "x", "y")):
                self.err("%s: gridPos %r needs integer h, w, x, y" % (name, g))
                continue
            if g["x"] < 0 or g["y"] < 0 or g["w"] < 1 or g["h"] < 1 or g["x"] + g["w"] > GRID_WIDTH:
                self.err("%s: gridPos %r is outside the %d columns" % (name, g, GRID_WIDTH))
            for other, og in boxes:
                if (g["x"] < og["x"] + og["w"] and og["x"] < g["x"] + g["w"]
                        and g["y"] < og["y"] + og["h"] and og["y"] < g["y"] + g["h"]):
                    self.err("%s: gridPos overlaps %s in the %s" % (name, other, context))
            boxes.append((name, g))
            if p.get("type") == "row" and p.get("collapsed"):
                self.check_layout(p.get("panels", []), "collapsed " + name)

    def collect(self, panels, variables):
        for p in panels:
            for t in p.get("targets") or []:
                if str(t.get("expr", "")).strip():
                    yield "%s target %s" % (panel_name(p), t.get("refId")), t["expr"]
        for name, v in variables.items():
            if v.get("type") != "query":
                continue
            q = variable_query(v).strip()
            m = re.fullmatch(r"label_values\((.*),\s*(\w+)\s*\)", q) or \
                re.fullmatch(r"query_result\((.*)\)", q)
            if m:
                yield 'variable "%s"' % name, m.group(1)
            elif not re.fullmatch(r"label_values\(\s*\w+\s*\)|label_names\(.*\)|metrics\(.*\)", q):
                self.err('variable "%s": query %r is not one this check understands' % (name, q))

    def check_expr(self, what, expr, variables):
        promql, unknown = substitute(expr, variables)
        for name in unknown:
            self.err("%s: unknown variable $%s in %s" % (what, name, expr))
        self.exprs.append((what, expr, promql))
        try:
            selectors, grouping = analyse(expr)
        except ValueError as e:
            self.err("%s: does not parse (%s): %s" % (what, e, expr))
            return
        labels = set()
        for metric, matchers in selectors:
            labels |= self.check_selector(what, expr, metric, matchers)
            if what.startswith("panel") and not selects_outbox(matchers):
                self.err('%s: %s ignores the outbox selection (add outbox=~"$outbox"): %s'
                         % (what, metric, expr))
        if self.ex.knows_labels:
            for label in sorted(grouping - labels if labels else set()):
                self.err("%s: groups by label %s, which none of its metrics has: %s"
                         % (what, label, expr))

    def check_selector(self, what, expr, metric, matchers):
        """Errors for a metric outboxd does not export, or (knowing the
        labels) a label or label value it never has; the metric's labels."""
        if metric is None:
            self.err("%s: a selector without a metric name: %s" % (what, expr))
            return set()
        if metric not in self.ex.series:
            hint = (" (a histogram: use %s)" % "/".join(metric + s for s in HISTOGRAM_SUFFIXES)
                    if metric in self.ex.histograms else "")
            self.err("%s: metric %s is not exported by outboxd (%s)%s: %s"
                     % (what, metric, self.ex.origin, hint, expr))
            return set()
        if not self.ex.knows_labels:
            return set()
        have = self.ex.series[metric]
        for label, op, value in matchers:
            if label not in have:
                self.err("%s: %s has no label %s: %s" % (what, metric, label, expr))
            elif op == "=" and "$" not in value and value not in have[label]:
                self.err('%s: %s has no series with %s="%s" (it has %s): %s'
                         % (what, metric, label, value, ", ".join(sorted(have[label])), expr))
        return set(have) | ({"le"} if metric.endswith("_bucket") else set())

    def promtool(self):
        """One rules file with every expression as a recording rule; if
        promtool refuses it, each alone, so the message names the bad one."""
        if not shutil.which("promtool"):
            self.err("promtool not found (Debian: apt-get install prometheus)")
            return
        ok, out = promtool_check([e for _, _, e in self.exprs])
        if ok:
            return
        for what, expr, promql in self.exprs:
            ok, out = promtool_check([promql])
            if not ok:
                self.err("%s: does not parse: %s\n    promtool: %s" % (what, expr, last_error(out)))


def selects_outbox(matchers):
    return any(label == "outbox" and op == "=~" and re.fullmatch(r"\$\{?outbox(:\w+)?\}?", value)
               for label, op, value in matchers)


def promtool_check(exprs):
    rules = {"groups": [{"name": "outboxd_dashboard", "rules": [
        {"record": "outboxd_dashboard:expr_%d" % i, "expr": e} for i, e in enumerate(exprs)]}]}
    with tempfile.NamedTemporaryFile("w", suffix=".yml", prefix="dashboard-rules-") as f:
        json.dump(rules, f, indent=1)  # JSON is YAML
        f.flush()
        r = subprocess.run(["promtool", "check", "rules", f.name],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode == 0, r.stdout


def last_error(out):
    m = re.search(r"could not parse expression: (.*)", out)
    return m.group(1).strip() if m else out.strip().replace("\n", " | ")


def variable_query(v):
    q = v.get("query", "")
    return q.get("query", "") if isinstance(q, dict) else str(q)


def panel_name(p):
    return 'panel %s "%s"' % (p.get("id"), p.get("title", ""))


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit("dashboard-check: %s: %s" % (path, e))


def summary(checker):
    metrics = set()
    for _, expr, _ in checker.exprs:
        metrics.update(m for m, _ in analyse(expr)[0] if m)
    queried = sum(1 for p in checker.d["panels"] if p.get("type") != "row")
    return ("%d panels, %d expressions parse (promtool check rules), %d metric names "
            "all exported by outboxd (%s%s)"
            % (queried, len(checker.exprs), len(metrics), checker.ex.origin,
               ", label names and values too" if checker.ex.knows_labels else ""))


# ---- self-test: each way the dashboard can go wrong must be caught ----

SELF_TEST_SCRAPE = """\
# TYPE outboxd_rows gauge
outboxd_rows{outbox="a.t",status="PENDING"} 1
outboxd_rows{outbox="a.t",status="DEAD"} 0
# TYPE outboxd_commit_to_confirm_seconds histogram
outboxd_commit_to_confirm_seconds_bucket{outbox="a.t",le="+Inf"} 0
outboxd_commit_to_confirm_seconds_sum{outbox="a.t"} 0
outboxd_commit_to_confirm_seconds_count{outbox="a.t"} 0
"""


def first_target(d):
    for p in d["panels"]:
        for t in p.get("targets") or []:
            return p, t
    raise SystemExit("dashboard-check: self-test needs a panel with a target")


def misspell_metric(d):
    _, t = first_target(d)
    t["expr"] = re.sub(r"\b(outboxd_\w+)\w\b", r"\1z", t["expr"], count=1)


def drop_paren(d):
    _, t = first_target(d)
    i = t["expr"].rindex(")")
    t["expr"] = t["expr"][:i] + t["expr"][i + 1:]


def set_expr(expr):
    def mutate(d):
        first_target(d)[1]["expr"] = expr
    return mutate


def queried(d):
    return [p for p in d["panels"] if p.get("type") != "row"]


def self_test_cases():
    def dup_id(d):
        ps = queried(d)
        ps[1]["id"] = ps[0]["id"]

    def fixed_ds(d):
        queried(d)[0]["datasource"] = {"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}

    def overlap(d):
        ps = queried(d)
        ps[1]["gridPos"] = dict(ps[0]["gridPos"])

    def no_all(d):
        for v in d["templating"]["list"]:
            if v.get("name") == "outbox":
                v["includeAll"] = False

    return [
        ("a misspelled metric", misspell_metric, None, "z is not exported"),
        ("a broken expression", drop_paren, None, "does not parse"),
        ("a panel ignoring the outbox variable", set_expr("sum(outboxd_rows)"), None,
         "ignores the outbox selection"),
        ("a metric of another exporter", set_expr('up{outbox=~"$outbox"}'), None, "metric up is not exported"),
        ("a histogram without _bucket", set_expr('histogram_quantile(0.5, rate(outboxd_commit_to_confirm_seconds{outbox=~"$outbox"}[5m]))'),
         None, "a histogram: use"),
        ("an undefined variable", set_expr('outboxd_rows{outbox=~"$outbx"}'), None, "unknown variable $outbx"),
        ("a duplicate panel id", dup_id, None, "duplicate panel id"),
        ("a fixed datasource", fixed_ds, None, "not the variable"),
        ("overlapping panels", overlap, None, "overlaps"),
        ("an outbox variable without All", no_all, None, "multi-select with All"),
        ("a wrong label value", set_expr('outboxd_rows{outbox=~"$outbox", status="Dead"}'),
         "scrape", 'status="Dead"'),
        ("a wrong label", set_expr('outboxd_rows{outbox=~"$outbox", state="DEAD"}'),
         "scrape", "has no label state"),
        ("grouping by a missing label", set_expr('sum by (relay) (outboxd_rows{outbox=~"$outbox"})'),
         "scrape", "groups by label relay"),
    ]


def self_test(dashboard, exported, where):
    failures = 0
    with tempfile.NamedTemporaryFile("w", suffix=".metrics") as f:
        f.write(SELF_TEST_SCRAPE)
        f.flush()
        scrape = Exported.from_scrape(f.name)
    for desc, mutate, source, expect in self_test_cases():
        d = copy.deepcopy(dashboard)
        mutate(d)
        errors = Checker(d, scrape if source else exported, where).run()
        hit = [e for e in errors if expect in e]
        print("dashboard-check: self-test: %s: %s" % (desc, "caught" if hit else "MISSED"))
        if hit:
            print("    " + hit[0])
        else:
            failures += 1
            print("    expected an error with %r, got %r" % (expect, errors))
    return failures


def main(argv):
    args, metrics, selftest = [], None, False
    it = iter(argv)
    for a in it:
        if a == "--metrics":
            metrics = next(it, None)
        elif a == "--self-test":
            selftest = True
        elif a.startswith("-") or len(args) == 1:
            print(__doc__.split("\n\n")[1], file=sys.stderr)
            return 64
        else:
            args.append(a)
    if "--metrics" in argv and not metrics:
        print("dashboard-check: --metrics needs a file", file=sys.stderr)
        return 64
    path = args[0] if args else os.path.join(ROOT, "conf/outboxd-dashboard.json")
    where = args[0] if args else "conf/outboxd-dashboard.json"
    try:
        exported = (Exported.from_scrape(metrics) if metrics
                    else Exported.from_source(os.path.join(ROOT, "daemon/metrics.c")))
    except OSError as e:
        sys.exit("dashboard-check: %s" % e)
    if not exported.series:
        sys.exit("dashboard-check: no outboxd metric found in %s" % exported.origin)
    dashboard = load(path)
    checker = Checker(dashboard, exported, where)
    errors = checker.run()
    for e in errors:
        print("dashboard-check: " + e, file=sys.stderr)
    if not errors:
        print("dashboard-check: %s: %s" % (where, summary(checker)))
    failed = self_test(dashboard, exported, where) if selftest and not errors else 0
    return 1 if errors or failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
