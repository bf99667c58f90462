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
            code = max(code, int(ExitCode.OK if self.certification.all_ready
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
    `suite` and a signed certificate per host with the key at `key_path` (created in the
    default place when absent)."""

    provision: ProvisionRequest
    validate: bool = True
    certify: bool = True
    suite: str = "quick"
    key_path: Path | None = None


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
    report = provision(p, progress=say)
    result = ChainResult(report)
    if report.gate_failed or p.check or not request.validate:
        return result
    say(f"validating (suite {request.suite}) ...")
    result.validation = run_validation(
        ValidateRequest(p.inventory, suite=request.suite, limit=p.limit, stack=p.stack,
                        runs_dir=p.runs_dir, become=p.become), progress=say)
    if request.certify:
        key, result.created_key = signing_key(request.key_path)
        # entered on the signer's list next to the runs, as `certify` does
        result.certification = sign_run(result.validation.run_dir, key,
                                         revocations=p.runs_dir / REVOCATIONS)
    return result


__all__ = ["ChainRequest", "ChainResult", "run_chain", "signing_key"]
