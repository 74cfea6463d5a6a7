"""``kqlab verify``: diff what is deployed against the vetted policy (:mod:`kqlab.export.verify`).

Reads the data contract from a Schema Registry (or a register-body file), topic configs from
a cluster and the gate's config file, and prints one line per difference.  Exit status 0:
everything deployed matches the policy; 1: drift (the lines say where); 2: the request was
wrong or a target could not be read (a verify that cannot look must not say "no drift").

``kqlab demo --verify`` runs :func:`cmd_demo_verify`: the demo policy deployed as exported
(an in-memory registry, the embedded broker, a gate file), verified clean, then drift planted
on every target and found.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kqlab.cli._common import (
    EXIT_FINDING,
    EXIT_OK,
    SubParsers,
    add_json_flag,
    load_policy_file,
    prepare_registries,
    write_json,
)

if TYPE_CHECKING:
    from kqlab.export.verify import VerifyReport

__all__ = ["add_parser", "cmd_demo_verify", "cmd_verify"]

_EXAMPLES = """\
examples:
  kqlab verify orders.yaml --registry https://sr.example.com:8081 --bootstrap broker:9092
  kqlab verify orders.yaml --contract export/confluent/orders-value.register.json
  kqlab verify orders.yaml --gate-config deploy/gate.yaml --json | jq .differences
  kqlab verify orders.yaml --bootstrap broker:9092 --topic orders --topic orders-eu \\
        --admin-config security.protocol=SSL

exit status: 0 no drift, 1 drift (one line per difference), 2 a wrong request or a target
that could not be read.  Registry credentials: --registry-config basic.auth.user.info=...
or the SR_BASIC_AUTH_USER_INFO environment variable (never the policy file).
"""


def add_parser(sub: SubParsers) -> None:
    """Add ``kqlab verify``."""
    v = sub.add_parser("verify", help="diff what is deployed against the vetted policy",
                       description="Read what is deployed — the subject's data contract in a "
                       "Schema Registry, topic configs on a cluster, the gate's config — and "
                       "diff it against what `kqlab export` writes for the policy: missing "
                       "rules, changed expressions, different modes, drifted topic settings. "
                       "One line per difference, saying what the policy says and what is "
                       "deployed.",
                       epilog=_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("policy", help="the vetted policy file (YAML)")
    v.add_argument("--registry", metavar="URL",
                   help="Schema Registry holding the data contract (mock:// in tests)")
    v.add_argument("--registry-config", action="append", default=[], metavar="KEY=VALUE",
                   help="a SchemaRegistryClient setting (repeatable)")
    v.add_argument("--subject", help="the contract's subject (default: the policy's value "
                   "subject, <topic>-value)")
    v.add_argument("--contract", metavar="FILE",
                   help="a deployed register body or subject config (JSON) instead of, or "
                   "besides, a registry")
    v.add_argument("--dlq-topic", metavar="TOPIC",
                   help="the DLQ topic the contract was exported with (then onFailure DLQ "
                   "and its topic are compared; without it DLQ counts as ERROR)")
    v.add_argument("--bootstrap", metavar="HOST:PORT",
                   help="a broker of the cluster whose topic configs to check")
    v.add_argument("--admin-config", action="append", default=[], metavar="KEY=VALUE",
                   help="an AdminClient setting (repeatable)")
    v.add_argument("--topic", action="append", default=None, metavar="TOPIC",
                   help="check this topic (repeatable; default: the policy's topics)")
    v.add_argument("--gate-config", metavar="FILE",
                   help="the gate's config file (kqlab export --target gate)")
    v.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                   help="per request to the registry and the cluster (default 10)")
    add_json_flag(v, help="print one JSON document (drift, differences, what was read)")
    v.set_defaults(run=cmd_verify)


def _pairs(items: list[str], option: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{option} takes KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def cmd_verify(args: argparse.Namespace) -> int:
    """``kqlab verify POLICY ...``: read each target given, print the differences."""
    from kqlab.export.verify import VerifyError, verify

    policy = load_policy_file(args.policy)
    if not (args.registry or args.contract or args.bootstrap or args.gate_config):
        raise VerifyError("nothing to verify: give --registry, --contract, --bootstrap or "
                          "--gate-config")
    registry = admin = None
    if args.registry:
        from kqlab.serde.schemas import registry_client

        conf: dict[str, Any] = {}
        for fmt in (policy.key, policy.value):
            if fmt.schemas is not None and fmt.schemas.registry == args.registry:
                conf.update(fmt.schemas.config or {})
        if os.environ.get("SR_BASIC_AUTH_USER_INFO"):
            conf["basic.auth.user.info"] = os.environ["SR_BASIC_AUTH_USER_INFO"]
        conf.update(_pairs(args.registry_config, "--registry-config"))
        prepare_registries(policy)
        registry = registry_client(args.registry, conf)
    if args.bootstrap:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": args.bootstrap,
                             **_pairs(args.admin_config, "--admin-config")})
    report = verify(policy, registry=registry, subject=args.subject,
                    contract_file=args.contract, admin=admin, topics=args.topic,
                    gate_file=args.gate_config, dlq_topic=args.dlq_topic,
                    timeout=args.timeout)
    status = EXIT_FINDING if report.drift else EXIT_OK
    if args.json:
        write_json(report.to_dict())
        return status
    print_report(report)
    return status


def print_report(report: VerifyReport, indent: str = "") -> None:
    """The human form: what was read, then one line per difference (or "no drift")."""
    print(f"{indent}kqlab verify — policy {report.policy!r} ({report.content_hash[:19]}…)")
    for c in report.checked:
        print(f"{indent}  read {c}")
    for n in report.notes:
        print(f"{indent}  note: {n}")
    if not report.drift:
        print(f"{indent}  no drift: what is deployed is what the policy says")
        return
    print(f"{indent}  DRIFT: {len(report.differences)} difference(s)")
    for line in report.lines():
        print(f"{indent}    {line}")


# ------------------------------------------------------------------------------------- demo

#: what the demo plants, as (target, item, what) of the difference it must cause
PLANTED = (
    ("confluent", "rule status-known", "missing rule"),
    ("confluent", "rule amount-positive", "expression"),
    ("confluent", "rule eur-only", "mode"),
    ("topics", "max.message.bytes", "topic config"),
    ("gate", "policy file hash", "policy hash"),
    ("gate", "rule amount-positive", "setting"),
)


def cmd_demo_verify(args: argparse.Namespace) -> int:
    """``kqlab demo --verify``: deploy the demo policy as exported, verify (no drift), plant
    drift on every target, verify again (every planted difference found)."""
    import json
    import tempfile

    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )
    from confluent_kafka.schema_registry import Schema

    from kqlab.embedded import broker
    from kqlab.export import export
    from kqlab.export.confluent import register_contract
    from kqlab.export.topic_policy import requirements
    from kqlab.export.verify import verify
    from kqlab.policy import load_policy
    from kqlab.serde.schemas import registry_client
    from kqlab.sources.demo import demo_policy_path

    policy_file = demo_policy_path()
    policy = load_policy(str(policy_file))
    registry = registry_client("mock://kqlab-demo-deployed")
    with tempfile.TemporaryDirectory(prefix="kqlab-demo-verify-") as tmp, broker() as b:
        # deploy: the contract registered, the topic created with the settings the replay
        # assumed, the gate's config beside the policy file it runs
        contract = export(policy, "confluent")
        register_contract(registry, contract)
        configs = {q.config: q.value for q in requirements(policy) if q.op == "equals"}
        for topic in policy.topics.names:
            b.create_topic(topic, config=configs)
        gate_dir = Path(tmp) / "gate"
        export(policy, "gate", policy_path="orders.yaml").write(tmp)
        (gate_dir / "orders.yaml").write_text(policy_file.read_text(encoding="utf-8"),
                                               encoding="utf-8")
        gate_file = gate_dir / "gate.yaml"
        admin = b.admin()
        clean = verify(policy, registry=registry, admin=admin, gate_file=gate_file)
        # drift: a contract re-registered by hand, a topic setting raised, the gate's policy
        # file edited after vetting
        body = json.loads(json.dumps(contract.data["register"]))
        rules = body["ruleSet"]["domainRules"]
        rules[:] = [r for r in rules if r["name"] != "status-known"]
        for r in rules:
            if r["name"] == "amount-positive":
                r["expr"] = "message.amount >= 0"
            if r["name"] == "eur-only":
                r["onFailure"] = "ERROR"
        registry.register_schema(contract.data["subject"], Schema.from_dict(body))
        topic = policy.topics.names[0]
        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[ConfigEntry(
            "max.message.bytes", "1048588", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([res])[res].result(10)
        running = gate_dir / "orders.yaml"
        text = running.read_text(encoding="utf-8")
        running.write_text(text.replace("min: 0.01", "min: 0"), encoding="utf-8")
        drifted = verify(policy, registry=registry, admin=admin, gate_file=gate_file)
    found = {(d.target, d.item, d.what) for d in drifted.differences}
    missing = [p for p in PLANTED if p not in found]
    ok = not clean.drift and not missing
    if args.json:
        write_json({"policy": policy.name, "ok": ok, "clean": clean.to_dict(),
                    "drifted": drifted.to_dict(),
                    "planted": [list(p) for p in PLANTED],
                    "not_found": [list(p) for p in missing]})
        return EXIT_OK if ok else EXIT_FINDING
    print(f"kqlab demo --verify — policy {policy.name!r} deployed as exported (contract in "
          "mock://kqlab-demo-deployed, topic on the embedded broker, gate config), verified:")
    print_report(clean, indent="  ")
    print("  then drift planted (contract re-registered by hand, max.message.bytes raised, "
          "the gate's policy file edited) and verified again:")
    print_report(drifted, indent="  ")
    verdict = "every planted difference found" if ok else \
        ("drift where none was planted" if clean.drift else
         f"NOT FOUND: {', '.join(' '.join(p) for p in missing)}")
    print(f"  {verdict}")
    return EXIT_OK if ok else EXIT_FINDING
