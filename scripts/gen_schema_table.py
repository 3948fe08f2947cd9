#!/usr/bin/env python3
"""Generates hodu's op schema table (src/ir/schema_table.inc) and docs/ops.md.

Source of truth:
  * every schema (all versions) of the installed python `onnx` package
    (Debian's python3-onnx 1.12: ai.onnx opsets 1..17, ai.onnx.ml 1..3,
    ai.onnx.preview.training 1);
  * scripts/schema/newer.py: a hand-written supplement with every op version
    introduced in ai.onnx opsets 18..27 (ONNX 1.13 .. 1.22), ai.onnx.ml 4..5,
    ai.onnx.preview 1;
  * scripts/schema/hodu_ops.py: hodu's own fused ops (domain "hodu").

Run:  /usr/bin/python3 scripts/gen_schema_table.py
The output is committed; the build does not need python.

Table format (one record per line, fields separated by single spaces):
  L <id> <type> <type> ...                      a list of type strings (shared)
  S <domain|-> <op> <since> <min_in> <max_in> <min_out> <max_out> <d|->
  I <name> <type_str> <s|o|v> <homogeneous 0/1> <min_arity>     an input
  O ...                                                          an output
  A <name> <kind> <required 0/1> [=<default>]                    an attribute
  T <name> <list id>                                             a type constraint
Defaults: numbers as text, strings percent-encoded, lists comma-separated.
"""
import copy
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MAX_INT = 2147483647

KIND_NAMES = {
    "FLOAT": "float", "INT": "int", "STRING": "string", "TENSOR": "tensor", "GRAPH": "graph",
    "FLOATS": "floats", "INTS": "ints", "STRINGS": "strings", "TENSORS": "tensors", "GRAPHS": "graphs",
    "SPARSE_TENSOR": "sparse_tensor", "SPARSE_TENSORS": "sparse_tensors",
    "TYPE_PROTO": "type_proto", "TYPE_PROTOS": "type_protos",
}


# ---- the in-memory model: plain dicts --------------------------------------

def param(name, type_str, option="s", homogeneous=True, min_arity=1):
    return {"name": name, "type": type_str, "option": option, "homogeneous": homogeneous,
            "min_arity": min_arity}


def attr(name, kind, required=False, default=None):
    assert kind in KIND_NAMES.values(), kind
    return {"name": name, "kind": kind, "required": required, "default": default}


def from_onnx_schema(s):
    from onnx import defs, helper

    opt = {defs.OpSchema.FormalParameterOption.Single: "s",
           defs.OpSchema.FormalParameterOption.Optional: "o",
           defs.OpSchema.FormalParameterOption.Variadic: "v"}

    def params(lst, min_count):
        out = []
        for i, p in enumerate(lst):
            o = opt[p.option]
            min_arity = 1
            if o == "v":  # the last one: what is left of the minimum count
                min_arity = max(0, min_count - i)
            out.append(param(p.name, p.typeStr, o, bool(p.isHomogeneous), min_arity))
        return out

    attrs = []
    for a in sorted(s.attributes.values(), key=lambda a: a.name):
        kind = KIND_NAMES[a.type.name]
        default = None
        dv = a.default_value
        if dv is not None and dv.name:  # set
            v = helper.get_attribute_value(dv)
            if kind == "string":
                default = v.decode() if isinstance(v, bytes) else v
            elif kind == "strings":
                default = [x.decode() if isinstance(x, bytes) else x for x in v]
            elif kind in ("float", "int", "floats", "ints"):
                default = list(v) if kind.endswith("s") else v
            else:
                default = None  # tensors/graphs: no textual default
        attrs.append(attr(a.name, kind, bool(a.required), default))
    return {
        "domain": s.domain if s.domain != "ai.onnx" else "",
        "name": s.name,
        "since": s.since_version,
        "inputs": params(s.inputs, s.min_input),
        "outputs": params(s.outputs, s.min_output),
        "attrs": attrs,
        "types": [(t.type_param_str, list(t.allowed_type_strs)) for t in s.type_constraints],
        "min_in": s.min_input, "max_in": s.max_input,
        "min_out": s.min_output, "max_out": s.max_output,
        "deprecated": bool(s.deprecated),
    }


class Table:
    def __init__(self):
        self.ops = {}  # (domain, name) -> {since: schema}

    def put(self, s):
        self.ops.setdefault((s["domain"], s["name"]), {})[s["since"]] = s

    def latest_before(self, domain, name, since):
        vs = self.ops.get((domain, name), {})
        older = [v for v in vs if v < since]
        if not older:
            raise KeyError(f"no version of {domain or 'ai.onnx'}.{name} before {since}")
        return vs[max(older)]


def fix_arity(s):
    """min/max input and output counts from the formal parameters."""
    for kind, lo, hi in (("inputs", "min_in", "max_in"), ("outputs", "min_out", "max_out")):
        ps = s[kind]
        mn = 0
        for i, p in enumerate(ps):
            if p["option"] == "s":
                mn = i + 1
            elif p["option"] == "v":
                mn = i + p["min_arity"]
        s[lo] = mn
        s[hi] = MAX_INT if ps and ps[-1]["option"] == "v" else len(ps)


# ---- the supplement API (used by scripts/schema/*.py) ----------------------

class Api:
    def __init__(self, table):
        self.t = table

    def op(self, name, since, inputs, outputs, attrs=(), types=(), domain="", deprecated=False):
        """A whole new op version."""
        s = {"domain": domain, "name": name, "since": since, "inputs": list(inputs),
             "outputs": list(outputs), "attrs": sorted(attrs, key=lambda a: a["name"]),
             "types": [(n, list(v)) for n, v in types], "deprecated": deprecated}
        fix_arity(s)
        self.t.put(s)
        return s

    def bump(self, name, since, domain="", types=None, add_attrs=(), drop_attrs=(), inputs=None,
             outputs=None, edit=None):
        """A new version derived from the newest older one: replaced type
        constraints (name -> list), added/removed attributes, optionally new
        formal parameter lists, or any `edit(schema)`."""
        s = copy.deepcopy(self.t.latest_before(domain, name, since))
        s["since"] = since
        s["deprecated"] = False
        if types:
            names = [n for n, _ in s["types"]]
            for n, v in types.items():
                if n in names:
                    s["types"][names.index(n)] = (n, list(v))
                else:
                    s["types"].append((n, list(v)))
        by_name = {a["name"]: a for a in s["attrs"]}
        for n in drop_attrs:
            by_name.pop(n)
        for a in add_attrs:
            by_name[a["name"]] = a
        s["attrs"] = sorted(by_name.values(), key=lambda a: a["name"])
        if inputs is not None:
            s["inputs"] = list(inputs)
        if outputs is not None:
            s["outputs"] = list(outputs)
        if edit:
            edit(s)
        fix_arity(s)
        self.t.put(s)
        return s

    def types_of(self, name, since, tc, domain=""):
        """The allowed types of constraint `tc` in the version in effect before `since`."""
        s = self.t.latest_before(domain, name, since)
        return dict(s["types"])[tc]


# ---- output ----------------------------------------------------------------

def pct(s):
    out = []
    for ch in s:
        if ch.isascii() and ch.isprintable() and ch not in " %,":
            out.append(ch)
        else:
            out.append("".join(f"%{b:02X}" for b in ch.encode()))
    return "".join(out)


def fmt_num(v):
    if isinstance(v, float):
        r = repr(v)
        return r
    return str(v)


def fmt_default(a):
    d = a["default"]
    if d is None:
        return ""
    k = a["kind"]
    if k == "string":
        return " =" + pct(d)
    if k == "strings":
        return " =" + ",".join(pct(x) for x in d)
    if k in ("floats", "ints"):
        return " =" + ",".join(fmt_num(x) for x in d)
    return " =" + fmt_num(d)


def write_table(table, path):
    lists = {}
    lines = []
    body = []
    for key in sorted(table.ops):
        for since in sorted(table.ops[key]):
            s = table.ops[key][since]
            body.append("S {} {} {} {} {} {} {} {}".format(
                s["domain"] or "-", s["name"], since, s["min_in"], s["max_in"], s["min_out"],
                s["max_out"], "d" if s["deprecated"] else "-"))
            for tag, ps in (("I", s["inputs"]), ("O", s["outputs"])):
                for p in ps:
                    body.append("{} {} {} {} {} {}".format(tag, p["name"], p["type"], p["option"],
                                                           int(p["homogeneous"]), p["min_arity"]))
            for a in s["attrs"]:
                body.append("A {} {} {}{}".format(a["name"], a["kind"], int(a["required"]),
                                                   fmt_default(a)))
            for n, allowed in s["types"]:
                k = tuple(allowed)
                if k not in lists:
                    lists[k] = len(lists)
                    lines.append("L {} {}".format(lists[k], " ".join(k)).rstrip())
                body.append("T {} {}".format(n, lists[k]))
    text = "\n".join(lines + body) + "\n"
    chunks = []
    # Raw string literals of at most ~60 KB each, concatenated by the compiler.
    cur = []
    size = 0
    for line in text.splitlines(keepends=True):
        if size + len(line) > 60000:
            chunks.append("".join(cur))
            cur, size = [], 0
        cur.append(line)
        size += len(line)
    chunks.append("".join(cur))
    with open(path, "w") as f:
        f.write("// Generated by scripts/gen_schema_table.py — do not edit. Format: see that script.\n")
        f.write("// clang-format off\n")
        f.write("static const char* const kSchemaTableChunks[] = {\n")
        for c in chunks:
            f.write('R"HODUSCHEMA(' + c + ')HODUSCHEMA",\n')
        f.write("};\n")
    return text


def write_docs(table, path):
    domains = {}
    for (d, n), vs in table.ops.items():
        domains.setdefault(d, []).append((n, sorted(vs), vs))
    order = ["", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training", "hodu"]
    out = ["# Operators", "",
           "Generated by `scripts/gen_schema_table.py` from ONNX's schemas and the supplements in",
           "`scripts/schema/` — do not edit. One row per op; *versions* are the opset versions in",
           "which the op (re)appeared. hodu's graph IR always uses the newest version's semantics;",
           "the ONNX importer rewrites older versions. `(deprecated)` marks a removed op.", ""]
    total = sum(len(v) for v in table.ops.values())
    out.append(f"{len(table.ops)} ops, {total} op versions.")
    out.append("")
    for d in sorted(domains, key=lambda x: (order.index(x) if x in order else 99, x)):
        out.append(f"## {d or 'ai.onnx'}")
        out.append("")
        if d == "hodu":
            out.append("hodu's own ops: fused ops, produced by the fusion passes, and gradient ops (`*Grad`),")
            out.append("produced by autodiff (never read from or written to ONNX files except by hodu itself).")
            out.append("")
            out.append("| op | inputs | outputs | attributes |")
            out.append("|---|---|---|---|")
            for n, vers, vs in sorted(domains[d]):
                s = vs[vers[-1]]
                def pl(ps):
                    return ", ".join(p["name"] + {"s": "", "o": "?", "v": "..."}[p["option"]] for p in ps)
                al = ", ".join(a["name"] + (f"={a['default']}" if a["default"] is not None else "")
                               for a in s["attrs"])
                out.append(f"| {n} | {pl(s['inputs'])} | {pl(s['outputs'])} | {al} |")
            out.append("")
            continue
        out.append("| op | versions |")
        out.append("|---|---|")
        for n, vers, vs in sorted(domains[d]):
            dep = " (deprecated)" if vs[vers[-1]]["deprecated"] else ""
            out.append(f"| {n} | {', '.join(map(str, vers))}{dep} |")
        out.append("")
    with open(path, "w") as f:
        f.write("\n".join(out))


def main():
    import onnx
    from onnx import defs
    table = Table()
    for s in defs.get_all_schemas_with_history():
        table.put(from_onnx_schema(s))
    api = Api(table)
    for fname in ("newer.py", "hodu_ops.py"):
        p = os.path.join(HERE, "schema", fname)
        ns = {"api": api, "param": param, "attr": attr, "__file__": p}
        with open(p) as f:
            exec(compile(f.read(), p, "exec"), ns)
    text = write_table(table, os.path.join(ROOT, "src", "ir", "schema_table.inc"))
    write_docs(table, os.path.join(ROOT, "docs", "ops.md"))
    total = sum(len(v) for v in table.ops.values())
    print(f"onnx {onnx.__version__}: {len(table.ops)} ops, {total} versions, {len(text)} bytes",
          file=sys.stderr)


if __name__ == "__main__":
    main()
