"""What every command shares: error handling, output, the options declared once.

Errors: a NodecertError becomes a ClickException subclass carrying its exit code
(`BadInput` 2, `Failed` 1) that prints "error: WHAT\n  how to fix: HINT".
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from nodecert.certs.i18n import N_
from nodecert.core.errors import ExitCode, NodecertError
from nodecert.core.textsafe import clean, one_line
from nodecert.core.verdict import Verdict


def echo(message: str = "", err: bool = False) -> None:
    """click.echo for anything that may hold node text: escapes and controls removed."""
    click.echo(clean(message), err=err)

def echo_results(results: list[Any], *, findings_max: int | None = None) -> None:
    """A group run's results for people: each check's verdict and summary, then its
    findings (the first `findings_max`)."""
    for r in results:
        echo(one_line(f"{r.check:<18} {r.verdict.name:<6} {r.summary}"))
        for f in r.findings[:findings_max]:
            echo(f"    {one_line(f)}")


def echo_run_end(run_dir: Path, cert: dict[str, Any]) -> None:
    """Where a group run's record is, and its certificate where one was signed."""
    echo(f"run: {run_dir}")
    if cert:
        echo(f"certificate: {cert['certificate']} ({cert['certificate_verdict']}), page: "
             f"{cert['html']}")


def end_group_run(rec: Any, cert: dict[str, Any], *, as_json: bool, what: str,
                  fields: dict[str, Any], named: str = "", notes: Sequence[str] = (),
                  findings_max: int | None = None) -> NoReturn:
    """A cluster or rack run's outcome (its GroupRecord `rec`, the certificate signed of
    it) printed, or as JSON with `fields`; exit 0 when it passed, 1 otherwise."""
    from nodecert.certs.cluster import passed
    code = ExitCode.OK if passed(rec) else ExitCode.FAILED
    verdict = rec.outcome.name
    if as_json:
        emit_json({"run_dir": str(rec.run_dir), "verdict": verdict, **fields,
                   "results": [r.as_dict() for r in rec.results], **cert})
        sys.exit(int(code))
    echo_results(rec.results, findings_max=findings_max)
    for note in notes:
        echo(note)
    echo(f"{what}: {verdict}" + (f"  named: {named}" if named else "")
         + ("  (SIMULATED)" if rec.simulated else ""))
    echo_run_end(rec.run_dir, cert)
    sys.exit(int(code))


F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_KEY_DIR = Path("~/.config/nodecert/keys")
_COLOURS = {Verdict.PASS: "green", Verdict.WARN: "yellow", Verdict.FAIL: "red",
            Verdict.ERROR: "magenta"}


class CommandError(click.ClickException):
    """A NodecertError on its way out; the subclass carries the exit code."""

    exit_code = int(ExitCode.BAD_INPUT)

    def __init__(self, error: NodecertError) -> None:
        super().__init__(error.render())
        self.error = error

    def show(self, file: Any = None) -> None:
        echo(f"error: {self.format_message()}", err=True)


class BadInput(CommandError):
    """Exit 2: the input was wrong (unknown name, malformed file); says how to fix it."""

    exit_code = int(ExitCode.BAD_INPUT)


class Failed(CommandError):
    """Exit 1: the input was fine, the answer is no."""

    exit_code = int(ExitCode.FAILED)


def command_error(error: NodecertError) -> CommandError:
    return Failed(error) if error.exit_code == ExitCode.FAILED else BadInput(error)


def handle_errors(fn: F) -> F:
    """Turn a NodecertError into a clear message on stderr and its exit code."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except NodecertError as exc:
            raise command_error(exc) from exc
    return wrapper  # type: ignore[return-value]


def emit_json(data: object) -> None:
    echo(json.dumps(data, indent=2, sort_keys=False))


def style(text: str, **kw: Any) -> str:
    """click.style, unless NO_COLOR is set (https://no-color.org: any non-empty value)."""
    return text if os.environ.get("NO_COLOR") else click.style(text, **kw)


def verdict_text(v: Verdict) -> str:
    return style(f"{v!s:<5}", fg=_COLOURS[v], bold=v is not Verdict.PASS)


def parse_date(ctx: click.Context, param: click.Parameter, value: str | None) -> dt.date | None:
    if value is None:
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a date like 2026-11-29") from None


def split_hosts(limit: tuple[str, ...]) -> tuple[str, ...]:
    """--limit a,b --limit c -> (a, b, c)."""
    return tuple(h for item in limit for h in item.split(",") if h)


# Options several commands take, declared once.
json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print machine-readable JSON instead of text.")
inventory_option = click.option("-i", "--inventory", "path", required=True,
                                type=click.Path(path_type=Path),
                                help="Ansible inventory (INI or YAML) with the hosts and "
                                     "their spec.")
limit_option = click.option("--limit", multiple=True,
                            help="Only these hosts (repeatable or comma-separated).")
runs_dir_option = click.option("--runs-dir", type=click.Path(path_type=Path),
                               default=Path("runs"), show_default=True,
                               help="Where run directories are kept.")
suite_option = click.option("--suite", default="quick", show_default=True,
                            help="quick | standard | full | lab (validators/suites.yml); "
                                 "standard, full and lab are acceptance suites (READY), "
                                 "quick gives health records.")
suite_file_option = click.option(
    "--suite-file", type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="A site's own suites file (the schema of validators/suites.yml); --suite names "
         "one of its suites. Recorded in the run's inputs.")
stack_option = click.option("--stack", "stack_name",
                            help="The pinned stack: what provision installs and validate checks "
                                 "conformance against (default: each host's nodecert_stack).")
signing_key_option = click.option("--key", "key_path", type=click.Path(path_type=Path),
                                  help="Signing key (default: ~/.config/nodecert/keys/"
                                       "nodecert.key, created if missing), or a pkcs11: URI "
                                       "(a key on an HSM or smart card).")
key_statement_option = click.option(
    "--key-statement", "key_statements", multiple=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="A key rotation or withdrawal statement (repeatable): trust the keys a trusted "
         "key handed over to, not the keys withdrawn.")
lang_option = click.option(
    "--lang", metavar="LANG", help="Language of what people read: en or pt-BR (default: "
                                   "the locale's, LANG/LC_ALL; English otherwise).")


pdf_option = click.option("--pdf", is_flag=True,
                          help="Also render each page as PDF (A4, fonts embedded).")


def step_name(name: str, tr: Callable[[str], str]) -> str:
    """A verification step's name in the reader's language (the JSON keeps the name)."""
    return tr(_STEP_NAMES.get(name, name))


# verify's and verify-bundle's step names, for the catalogue.
_STEP_NAMES = {n: n for n in (N_("signature"), N_("payload type"), N_("statement"),
                              N_("validity"), N_("revocation"), N_("expected"),
                              N_("subject"), N_("hardware"), N_("verdict"), N_("scope"),
                              N_("health records"),
                              N_("hardware kind"), N_("keys"), N_("manifest"),
                              N_("files"), N_("certificates"),
                              N_("attestation"), N_("revocations"))}
revocations_option = click.option(
    "--revocations", type=click.Path(path_type=Path, dir_okay=False),
    help="The signed revocation list to enter the new certificate(s) on (default: "
         "revocations.intoto.dsse.json next to the run directory).")
# What a certificate must be to count: `acceptance` refuses health records (HEALTHY).
require_option = click.option(
    "--require", type=click.Choice(["acceptance"]), default=None,
    help="acceptance: refuse anything but an acceptance certificate (a health record "
         "fails, with the stages it lacks).")
# Picking checks is --only everywhere: --check means a dry run (provision, Ansible).
checks_option = click.option("--only", "checks", multiple=True, metavar="CHECK",
                             help="Only these checks of the suite (repeatable).")


def seen_lists_default() -> Path:
    """Where a verifier remembers the newest revocation list of each signer it saw."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path("~/.local/state").expanduser())
    return Path(base) / "nodecert" / "seen-revocation-lists.json"


def freshness_options(f: F) -> F:
    """--max-list-age-days and --seen-lists: how fresh a revocation list must be."""
    f = click.option(
        "--seen-lists", type=click.Path(path_type=Path, dir_okay=False), default=None,
        help="Where this verifier remembers the newest revocation list of each signer; a "
             "list older than one seen before is refused (default: "
             "$XDG_STATE_HOME/nodecert/seen-revocation-lists.json).")(f)
    return click.option(
        "--max-list-age-days", type=click.FloatRange(min=0, min_open=True), default=None,
        help="Refuse a revocation list issued longer ago than this (default: any age).")(f)


def freshness(max_list_age_days: float | None, seen_lists: Path | None) -> Any:
    from nodecert.certs.revocations import Freshness

    return Freshness(dt.timedelta(days=max_list_age_days) if max_list_age_days else None,
                     seen_lists or seen_lists_default())


def become_options(f: Any) -> Any:
    """--become-password-file and --vault-password-file, as ansible-playbook takes them."""
    f = click.option("--vault-password-file", "vault_file",
                     type=click.Path(path_type=Path, dir_okay=False),
                     help="Opens vault-encrypted inventory values such as a vaulted "
                          "ansible_become_password (default: $ANSIBLE_VAULT_PASSWORD_FILE)."
                     )(f)
    return click.option("--become-password-file", "become_file",
                        type=click.Path(path_type=Path, dir_okay=False),
                        help="sudo password for hosts reached as a non-root ansible_user "
                             "with ansible_become: a file holding only the password (mode "
                             "600; an executable is run). Never logged or stored (default: "
                             "$ANSIBLE_BECOME_PASSWORD_FILE).")(f)


def slice_options(f: Any) -> Any:
    """--slice and --run-id: one slice of a run split over several controllers."""
    f = click.option("--run-id", help="The run's id, the same for every slice of it.")(f)
    return click.option(
        "--slice", "slice_text", metavar="K/N|auto",
        help="Run slice K of N of the hosts (every N-th in name order), into the run "
             "--run-id names under --runs-dir (shared storage); `auto`: this task of a "
             "Slurm job array. The last slice to end merges the run.")(f)


def slice_of(slice_text: str | None, run_id: str | None) -> Any:
    """The Slice --slice and --run-id give (None without --slice)."""
    from nodecert.validation.slices import Slice
    if run_id is not None and slice_text is None:
        raise click.UsageError("--run-id names the run a slice writes into: give --slice")
    return Slice.parse(slice_text, run_id) if slice_text is not None else None


def become_source(become_file: Path | None, vault_file: Path | None) -> Any:
    from nodecert.transport.become import BecomeSource
    return BecomeSource.from_env(become_file, vault_file)


threshold_option = click.option("--threshold", "threshold_items", multiple=True,
                                metavar="KEY=VALUE",
                                help="Override a threshold for every host (recorded as the "
                                     "command line's).")


# A table of every host up to this many; beyond it only the hosts that need a look
# (the run's validate.json and each host's results.json hold every host).
TABLE_MAX_HOSTS = 32
TABLE_MAX_SHOWN = 100


def print_validation(run: Any) -> None:
    hosts = sorted(run.hosts.items())
    verdicts = {name: h.verdict for name, h in hosts}
    shown = hosts if len(hosts) <= TABLE_MAX_HOSTS else \
        [(n, h) for n, h in hosts if verdicts[n] >= Verdict.FAIL]
    echo(f"{'host':<14} {'verdict':<8} {'status':<12} detail")
    for name, h in shown[:TABLE_MAX_SHOWN]:
        bad = [r for r in h.results if r.verdict.value >= Verdict.FAIL.value]
        detail = h.error or "; ".join(f"{r.check}: {r.summary}" for r in bad[:3]) or h.counts()
        sim = " SIMULATED" if h.simulated else ""
        echo(one_line(f"{name:<14} {verdicts[name].name:<8} {h.status:<12} {detail}{sim}"))
    if len(shown) < len(hosts) or len(shown) > TABLE_MAX_SHOWN:
        counts = {v.name: sum(1 for x in verdicts.values() if x == v) for v in Verdict}
        echo(f"{len(hosts)} hosts: " + ", ".join(f"{n} {v}" for v, n in counts.items() if n)
             + f"; {min(len(shown), TABLE_MAX_SHOWN)} shown above (FAIL/ERROR), every host "
               "in the run's validate.json")
    echo(f"run: {run.run_dir}")


def certify_options(f: F) -> F:
    """A group certificate's signing options (cluster, rack): the run, the key, how long
    it stays valid and how old its results may be."""
    for option in reversed((
            click.argument("run_dir", type=click.Path(path_type=Path, exists=True,
                                                      file_okay=False)),
            click.option("--key", "key_path", required=True,
                         type=click.Path(path_type=Path, dir_okay=False),
                         help="Private signing key (nodecert keys init), or a pkcs11: URI "
                              "(a key on an HSM)."),
            click.option("--valid-days", default=30, show_default=True,
                         type=click.IntRange(min=1),
                         help="Days the certificate stays valid, counted from the run's end."),
            click.option("--max-result-age-days", "max_age_days",
                         type=click.FloatRange(min=0.01), default=7.0, show_default=True,
                         help="Refuse a run that ended longer ago than this."),
            revocations_option, lang_option, pdf_option)):
        f = option(f)
    return f
