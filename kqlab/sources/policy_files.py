"""A policy file as a command reads it: fully checked before anything runs on it, with the
schema registries the package itself knows filled first.

Here, not in the CLI, because the commands are not its only readers: an exported job (the
Spark enforcer's entry point) loads its policy file the same way, with the same errors.
"""

from __future__ import annotations

import importlib

from kqlab.policy import Policy

__all__ = ["load_policy_file", "prepare_registries"]

#: in-memory (mock://) registries the package itself knows how to fill: a fresh process
#: sees them empty, so the demo policies would have no schemas to encode or decode with
_KNOWN_MOCK_REGISTRIES = {"mock://kqlab-demo": "kqlab.sources.demo_topics:register_schemas"}


def prepare_registries(policy: Policy) -> None:
    """Fill the in-memory schema registries the package knows (the demo's), as its demo does.

    A ``mock://`` registry lives in the process that filled it; a command starts a fresh
    process, so without this the demo policies would find no schemas to decode with.
    """
    for fmt in (policy.key, policy.value):
        url = fmt.schemas.registry if fmt.schemas is not None else None
        target = _KNOWN_MOCK_REGISTRIES.get(url or "")
        if target:
            module, _, name = target.partition(":")
            getattr(importlib.import_module(module), name)(url)


def load_policy_file(path: str) -> Policy:
    """The policy file ``path``, fully checked before the command does anything with it.

    A malformed policy raises :class:`~kqlab.policy.PolicyError` here (``file:line[:column]:
    key: reason``, exit status 2, no traceback), so nothing runs on a broken policy.  A policy
    naming a schema registry is read a second time, after :func:`prepare_registries`, with
    ``contact_registries=True``: its rules are then checked against the registry's schemas
    too (the command reads that registry anyway).
    """
    from kqlab.policy import PolicyError, load_policy

    try:
        policy = load_policy(path)
    except IsADirectoryError:
        raise PolicyError("is a folder, not a policy file — pass the .yaml file inside it",
                          file=path) from None
    except FileNotFoundError:
        raise PolicyError("no such file — check the path (a policy is a YAML file such as "
                          "orders.policy.yaml)", file=path) from None
    except OSError as exc:
        raise PolicyError(f"cannot be read ({exc.strerror}) — check its permissions",
                          file=path) from None
    if any(f.schemas is not None and f.schemas.registry for f in (policy.key, policy.value)):
        prepare_registries(policy)
        policy = load_policy(path, contact_registries=True)
    return policy
