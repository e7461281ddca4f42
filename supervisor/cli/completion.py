"""``hermesd completion bash|zsh|fish``: shell completion by argcomplete, from hermesd's own parser.

The script a shell sources is argcomplete's: on <TAB> it runs ``hermesd`` itself with argcomplete's
variables set, and :func:`complete` (called by ``main`` before parsing, and only then) answers from
the real parser and exits. So every command, verb, option and choice completes as the parser has
it, and a new command needs nothing here. Only what a *value* is must be said:

* profile names for an argument whose dest is ``profile``/``profiles``, whose metavar is
  ``PROFILE``, or that a parser author marked ``action.complete = "profile"``: the profiles hermesd
  would serve under the ``--root`` already on the line, else under the root resolved from
  ``HERMES_HOME`` as upstream resolves it (the same code the daemon uses, so the same answer);
* directories for ``--root`` and ``DIR`` metavars; files for ``FILE``, ``PATH`` and ``ARCHIVE``
  metavars and ``--output``; nothing for other free-form values.

Internal commands (``_planned-stop``), hidden ones (an old name: ``adopt``) and arguments with
``help=SUPPRESS`` (an old flag: ``profile alias --adopt``) are not offered.
argcomplete is imported by this module alone, and this module only by ``completion`` and under
completion: no other command pays for it. A <TAB> costs one ``hermesd`` start that builds the whole
parser (60-90 ms measured, against none for the hand-written scripts this replaced: the price of
600 fewer lines and of profile names listed by the same code the daemon uses).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import argcomplete
from argcomplete.completers import DirectoriesCompleter, FilesCompleter, SuppressCompleter

from profiles.discovery import profiles_to_serve
from profiles.paths import resolve_root
from supervisor.cli.common import Commands

SHELLS = ("bash", "zsh", "fish")
PROG = "hermesd"

_PROFILE_DESTS = frozenset({"profile", "profiles"})
_DIR_METAVARS = frozenset({"DIR", "ROOT", "DIRECTORY"})
_FILE_METAVARS = frozenset({"FILE", "PATH", "ARCHIVE"})
_FILE_DESTS = frozenset({"output", "archive"})


def profile_names(prefix: str, parsed_args: argparse.Namespace, **_kwargs: object) -> list[str]:
    """The profiles hermesd would serve under the root on the command line (or from ``HERMES_HOME``)."""
    given = getattr(parsed_args, "root", None)
    root = Path(given) if given else resolve_root()
    try:
        return [name for name, _home in profiles_to_serve(True, root=root) if name.startswith(prefix)]
    except OSError:
        return []


def _completer(action: argparse.Action) -> object | None:
    """What completes ``action``'s value (``None``: argcomplete's own, i.e. its choices)."""
    explicit = getattr(action, "complete", None)
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    if explicit == "profile" or (explicit is None and (metavar == "PROFILE" or action.dest in _PROFILE_DESTS)):
        return profile_names
    if action.choices:
        return None
    if explicit == "dir" or action.dest == "root" or metavar in _DIR_METAVARS:
        return DirectoriesCompleter()
    if explicit == "file" or metavar in _FILE_METAVARS or action.dest in _FILE_DESTS:
        return FilesCompleter()
    return SuppressCompleter()


def _mark(parser: argparse.ArgumentParser, hidden: set[str]) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            listed = {choice.dest for choice in action._choices_actions}  # those declared with help
            for name, sub in action.choices.items():
                if name.startswith("_") or name not in listed:
                    hidden.add(name)
                _mark(sub, hidden)
        elif action.nargs != 0:
            action.completer = _completer(action)  # type: ignore[attr-defined]


def complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request from ``parser`` and exit (a no-op outside completion)."""
    hidden: set[str] = set()
    _mark(parser, hidden)
    argcomplete.autocomplete(parser, exclude=sorted(hidden), always_complete_options=False)


def cmd_completion(args: argparse.Namespace) -> int:
    sys.stdout.write(argcomplete.shellcode([PROG], shell=args.shell))
    return 0


HELP = "print a shell completion script (bash, zsh or fish) for hermesd's own commands"
INSTALL = """\
install:
  bash  hermesd completion bash > ~/.local/share/bash-completion/completions/hermesd
  zsh   hermesd completion zsh > "${fpath[1]}/_hermesd"
  fish  hermesd completion fish > ~/.config/fish/completions/hermesd.fish"""


def register(commands: Commands) -> None:
    p = commands.add("completion", cmd_completion, HELP, 'eval "$(hermesd completion bash)"',
                     description=HELP + ".", epilog=INSTALL, root=False)
    p.add_argument("shell", choices=SHELLS, help="the shell to generate for")

