"""The main job as one library call: provision -> conformance -> validate -> certify.

`provision` on the command line is a thin wrapper over `run_chain`; a site's own
tooling can call it the same way, without click.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nodecert.core.errors import ExitCode
from nodecert.core.verdict import Verdict
from nodecert.inventory.reader import Inventory, resolve

if TYPE_CHECKING:
    from nodecert.provision.run import ProvisionRequest

DEFAULT_KEY = Path("~/.config/nodecert/keys/nodecert.key")


@dataclass
class ChainResult:
    provision: Any  # provisioning.ProvisionReport
    validation: Any = None  # validation.ValidationRun, unless stopped before
    certification: Any = None  # certify.CertifyRun, unless stopped before
    created_key: Any = None  # signing.KeyPair, when the default key was created now

    @property
    def exit_code(self) -> int:
        code = int(self.provision.exit_code)
        if self.validation is not None:
            ok = self.validation.verdict <= Verdict.WARN and not self.validation.interrupted
            code = max(code, int(ExitCode.OK if ok else ExitCode.FAILED))
        if self.certification is not None:
            # READY, or a health record where no acceptance was asked (--suite quick)
            code = max(code, int(ExitCode.OK if self.certification.ok()
                                 else ExitCode.FAILED))
        return code


def signing_key(key_path: Path | None) -> tuple[Any, Any]:
    """(private key, KeyPair created now or None): the given key, else the default one,
    created 0600 on first use."""
    from nodecert.certs.signing import init_key, load_private_key

    created = None
    if key_path is None:
        key_path = DEFAULT_KEY.expanduser()
        if not key_path.exists():
            created = init_key(key_path.parent)
    return load_private_key(key_path), created


@dataclass(frozen=True)
class ChainRequest:
    """The main job: provisioning as asked, then (unless told not to) validation with
    `suite` (None: the acceptance suite for the hosts, `acceptance_suite`) and a signed
    certificate per host with the key at `key_path` (created in the default place when
    absent)."""

    provision: ProvisionRequest
    validate: bool = True
    certify: bool = True
    suite: str | None = None
    key_path: Path | None = None


# The acceptance suite the main job validates with: lab hosts' simulated GPUs are
# accepted on the lab profile's short durations, real hosts on the production one.
LAB_SUITE, REAL_SUITE = "lab", "standard"


def acceptance_suite(inventory: Path | Inventory, limit: tuple[str, ...] = ()) -> str:
    """`lab` when every host is a lab host (nodecert_simulated), `standard` when none is;
    an inventory that mixes both is refused (one run cannot hold both minimums)."""
    from nodecert.core.errors import InventoryError

    inventory = resolve(inventory)
    specs = inventory.hosts
    if limit:
        specs = {h: specs[h] for h in inventory.select(limit, list(specs))}
    lab = sorted(h for h, s in specs.items() if s.simulated)
    real = sorted(h for h, s in specs.items() if not s.simulated)
    if lab and real:
        raise InventoryError(
            f"the inventory mixes lab hosts ({', '.join(lab[:5])}) and real hosts "
            f"({', '.join(real[:5])}): no one acceptance suite fits both",
            where=str(inventory),
            hint="provision them in separate runs (--limit), or name the suite (--suite)")
    return LAB_SUITE if lab else REAL_SUITE


def run_chain(request: ChainRequest, *,
              progress: Callable[[str], None] | None = None) -> ChainResult:
    """Provision (gate first: nothing is touched when it fails), then validate and
    certify every host unless told to stop earlier. Raises NodecertError on bad input."""
    from nodecert.certs.certify import certify as sign_run
    from nodecert.certs.revocations import DEFAULT_NAME as REVOCATIONS
    from nodecert.provision.run import provision
    from nodecert.validation.run import ValidateRequest
    from nodecert.validation.run import validate as run_validation

    say = progress or (lambda line: None)
    p = request.provision
    # chosen before anything is touched: a mixed inventory is bad input
    inventory = resolve(p.inventory) if request.validate and not p.check else p.inventory
    suite = request.suite or (acceptance_suite(inventory, p.limit)
                              if request.validate and not p.check else REAL_SUITE)
    report = provision(p, progress=say)
    result = ChainResult(report)
    if report.gate_failed or p.check or not request.validate:
        return result
    say(f"validating (suite {suite}) ...")
    result.validation = run_validation(
        ValidateRequest(inventory, suite=suite, limit=p.limit, stack=p.stack,
                        runs_dir=p.runs_dir, become=p.become), progress=say)
    if request.certify:
        key, result.created_key = signing_key(request.key_path)
        # entered on the signer's list next to the runs, as `certify` does
        result.certification = sign_run(result.validation.run_dir, key,
                                         revocations=p.runs_dir / REVOCATIONS)
    return result


__all__ = ["LAB_SUITE", "REAL_SUITE", "ChainRequest", "ChainResult", "acceptance_suite",
           "run_chain", "signing_key"]
