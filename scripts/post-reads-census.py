#!/usr/bin/env python3
"""Census of SELECT methods that are not bound to an HTTP GET or HEAD.

Walks an unpacked StackQL provider registry (<registry>/<provider>/<version>/services/*.yaml)
and lists every method referenced from a resource's `sqlVerbs.select` (and every method no
`sqlVerbs` list names that is labelled SELECT by its name: select, list, get) whose operation's HTTP
verb is not get/head (POST searches, PUT/PATCH/DELETE oddities, ...). Those are the methods a
read-only gate can't judge from the verb alone; crates/engine/data/method-effects.tsv records a
reviewed verdict (read / write / delete / other) for each of them.

Output (tab-separated, sorted, one line per method):
  provider  service  resource  method  VERB  path  graphql  operationId
where path is the OpenAPI path template (unescaped) and graphql is `graphql` when the operation
carries x-stackQL-graphQL (its read/write nature comes from the GraphQL document, not from here),
`-` otherwise.

With --check TSV, compares the registry with the table instead: the table covers every method
of the census except the GraphQL-backed ones and those of the providers given with --exclude
(default: aws, awscc, which are decided from AWS's access-level data). Prints the registry's
methods missing from the table and the table's entries no longer in the registry (or whose verb
or path changed); exits 1 when any is missing or changed, 0 otherwise (stale entries only warn).

Usage:
  scripts/post-reads-census.py --registry DIR [--provider NAME ...] [--exclude NAME ...]
                               [--check crates/engine/data/method-effects.tsv]

  DIR is the folder holding the provider folders (e.g. an unpacked stackql-provider-registry's
  providers/src). Needs python3 and PyYAML.
"""

import argparse
import os
import sys

try:
    import yaml
except ImportError:  # pragma: no cover
    sys.exit("post-reads-census: needs PyYAML (pip install pyyaml)")

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

READ_VERBS = {"get", "head"}
EFFECTS = {"read", "write", "delete", "other"}
DEFAULT_EXCLUDE = ["aws", "awscc"]


def unescape_pointer(token):
    return token.replace("~1", "/").replace("~0", "~")


def resolve_local(doc, ref):
    """Resolves a local JSON pointer ('#/a/b') against doc; returns (value, tokens)."""
    if not ref.startswith("#/"):
        return None, None
    tokens = [unescape_pointer(t) for t in ref[2:].split("/")]
    node = doc
    for t in tokens:
        if not isinstance(node, dict) or t not in node:
            return None, tokens
        node = node[t]
    return node, tokens


def service_files(registry, providers):
    for provider in sorted(os.listdir(registry)):
        pdir = os.path.join(registry, provider)
        if not os.path.isdir(pdir) or (providers and provider not in providers):
            continue
        for version in sorted(os.listdir(pdir)):
            sdir = os.path.join(pdir, version, "services")
            if not os.path.isdir(sdir):
                continue
            for name in sorted(os.listdir(sdir)):
                if name.endswith((".yaml", ".yml")):
                    yield provider, os.path.join(sdir, name)


def census(registry, providers=None):
    rows = []
    problems = []
    scanned = set()  # provider ids (first part of resource ids) of the documents read
    for provider, path in service_files(registry, providers):
        with open(path, "rb") as f:
            doc = yaml.load(f, Loader=Loader)
        if not isinstance(doc, dict):
            continue
        resources = ((doc.get("components") or {}).get("x-stackQL-resources")) or {}
        for key, res in resources.items():
            if not isinstance(res, dict):
                continue
            rid = str(res.get("id") or "")
            parts = rid.split(".")
            if len(parts) != 3:
                problems.append(f"{path}: resource {key}: id {rid!r} is not provider.service.resource")
                continue
            scanned.add(parts[0])
            methods = res.get("methods") or {}
            verbs = res.get("sqlVerbs") or {}
            selects = [
                unescape_pointer(sel["$ref"].rsplit("/", 1)[-1])
                for sel in (verbs.get("select") or [])
                if isinstance(sel, dict) and sel.get("$ref")
            ]
            # A method no sqlVerbs list names is labelled SELECT by its name (select, list,
            # get), as StackQL and the engine's SHOW METHODS label it.
            bound = {
                unescape_pointer(ref["$ref"].rsplit("/", 1)[-1])
                for refs in verbs.values() if isinstance(refs, list)
                for ref in refs if isinstance(ref, dict) and ref.get("$ref")
            }
            selects += sorted(
                name for name in methods
                if name not in bound and name.lower() in ("select", "list", "get")
            )
            seen = set()
            for mname in selects:
                if mname in seen:
                    continue
                seen.add(mname)
                method = methods.get(mname)
                if not isinstance(method, dict):
                    problems.append(f"{path}: {rid}: select refers to missing method {mname}")
                    continue
                op_ref = ((method.get("operation") or {}).get("$ref")) or ""
                op, tokens = resolve_local(doc, op_ref)
                if op is None or not tokens or len(tokens) != 3 or tokens[0] != "paths":
                    problems.append(f"{path}: {rid}.{mname}: unresolved operation {op_ref!r}")
                    continue
                _, api_path, verb = tokens
                if verb.lower() in READ_VERBS:
                    continue
                graphql = "graphql" if "x-stackQL-graphQL" in op else "-"
                rows.append((parts[0], parts[1], parts[2], mname, verb.upper(), api_path,
                             graphql, str(op.get("operationId") or "-")))
    rows.sort()
    return rows, problems, scanned


def read_table(path):
    entries = {}
    errors = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("#"):
                continue
            cols = line.split("\t")
            if len(cols) != 8:
                errors.append(f"{path}:{n}: {len(cols)} columns, want 8")
                continue
            provider, service, resource, method, verb, api_path, effect, reason = cols
            if effect not in EFFECTS:
                errors.append(f"{path}:{n}: effect {effect!r} not one of {sorted(EFFECTS)}")
            if not reason.strip():
                errors.append(f"{path}:{n}: empty reason")
            key = (provider, service, resource, method)
            if key in entries:
                errors.append(f"{path}:{n}: duplicate entry {'.'.join(key)}")
            entries[key] = (verb, api_path, effect, n)
    return entries, errors


def main():
    ap = argparse.ArgumentParser(
        description="List StackQL SELECT methods not bound to GET/HEAD; optionally check "
                    "them against the reviewed method-effects table.",
        epilog="example: scripts/post-reads-census.py --registry /tmp/reg/src "
               "--check crates/engine/data/method-effects.tsv")
    ap.add_argument("--registry", help="folder holding the unpacked provider folders")
    ap.add_argument("--check", metavar="TSV", help="compare with this method-effects table")
    ap.add_argument("--provider", action="append", default=[],
                    help="only this provider folder, e.g. googleapis.com (repeatable)")
    ap.add_argument("--exclude", action="append", default=None,
                    help="provider the table does not cover (repeatable; default: aws, awscc)")
    args = ap.parse_args()
    if not args.registry:
        ap.print_help(sys.stderr)
        sys.exit(2)
    if not os.path.isdir(args.registry):
        sys.exit(f"post-reads-census: {args.registry}: not a folder")

    rows, problems, scanned = census(args.registry, set(args.provider))
    for p in problems:
        print(f"warning: {p}", file=sys.stderr)

    if not args.check:
        for r in rows:
            print("\t".join(r))
        return 0

    exclude = set(DEFAULT_EXCLUDE if args.exclude is None else args.exclude)
    entries, errors = read_table(args.check)
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    wanted = {}
    for r in rows:
        if r[0] in exclude or r[6] == "graphql":
            continue
        wanted[r[:4]] = r
    missing = [k for k in sorted(wanted) if k not in entries]
    changed = []
    for k in sorted(wanted):
        if k in entries:
            verb, api_path, _, n = entries[k]
            r = wanted[k]
            if (verb, api_path) != (r[4], r[5]):
                changed.append((k, n, f"{verb} {api_path}", f"{r[4]} {r[5]}"))
    stale = [k for k in sorted(entries)
             if k not in wanted and (not args.provider or k[0] in scanned)]
    for k in missing:
        r = wanted[k]
        print(f"missing: {'.'.join(k)}\t{r[4]}\t{r[5]}\t{r[7]}")
    for k, n, old, new in changed:
        print(f"changed: {'.'.join(k)} (line {n}): table has {old}, registry has {new}")
    for k in stale:
        print(f"stale: {'.'.join(k)} (line {entries[k][3]}) is no longer a non-GET select "
              f"in the registry")
    print(f"{len(wanted)} methods in the registry, {len(entries)} in the table: "
          f"{len(missing)} missing, {len(changed)} changed, {len(stale)} stale",
          file=sys.stderr)
    return 1 if (missing or changed or errors) else 0


if __name__ == "__main__":
    sys.exit(main())
