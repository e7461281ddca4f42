"""``hermesd completion bash|zsh|fish``: shell completion generated from hermesd's own parser.

The scripts are built by walking the real argparse tree (``supervisor.cli.main.build_parser()``):
every subcommand, nested verb (``profile …``), option and positional argument comes from
there, so a command added to the CLI is completable without touching this module. Only the
*kind* of value an argument takes is inferred:

* ``choices`` are offered as words;
* a positional or option whose metavar is ``PROFILE`` or whose dest is ``profile``/``profiles``
  completes profile names; any action can opt in explicitly with ``action.complete = "profile"``
  (or ``"dir"``, ``"file"``, ``"none"``), which is how a parser author marks e.g. ``NAME`` args;
* ``--root`` and ``DIR`` metavars complete directories; ``FILE``, ``PATH`` and ``ARCHIVE``
  metavars and ``--output`` complete files.

Subcommands whose name starts with ``_`` (internal helpers such as ``_planned-stop``) and
arguments with ``help=SUPPRESS`` are left out.

Profile names are listed by the shell itself, not by running hermesd at every <TAB> (a Python
start per keypress is noticeable): ``default`` plus each real directory in ``<root>/profiles``
with a valid, unreserved name, i.e. what ``profiles_to_serve`` serves. The root is the
``--root`` already typed on the line, else resolved from ``HERMES_HOME`` as upstream does
(``~/.hermes`` when unset or inside it; the grandparent of ``…/profiles/<name>``; else itself).
The name rule and reserved names are taken from ``profiles.names`` at generation time.

All three shells share one algorithm: walk the words before the cursor, following subcommands
and skipping options with their values, to find the command path, the number of positionals
already given and any ``--root``; then offer option values, options, or subcommands plus the
next positional's values.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from dataclasses import dataclass, field

SHELLS = ("bash", "zsh", "fish")

_PROFILE_DESTS = frozenset({"profile", "profiles"})
_DIR_METAVARS = frozenset({"DIR", "ROOT", "DIRECTORY"})
_FILE_METAVARS = frozenset({"FILE", "PATH", "ARCHIVE"})
_FILE_DESTS = frozenset({"output", "archive"})


@dataclass(frozen=True, slots=True)
class Option:
    flags: tuple[str, ...]
    help: str
    value: str  # "" when the flag takes no value; else a spec (see _spec)


@dataclass(frozen=True, slots=True)
class Positional:
    spec: str
    first: int  # index among positionals
    last: int | None  # inclusive; None = repeats to the end


@dataclass(slots=True)
class Command:
    path: tuple[str, ...]
    help: str = ""
    options: list[Option] = field(default_factory=list)
    positionals: list[Positional] = field(default_factory=list)
    subcommands: dict[str, Command] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return " ".join(self.path)

    def walk(self) -> Iterator[Command]:
        yield self
        for sub in self.subcommands.values():
            yield from sub.walk()


# --------------------------------------------------------------------------- parser -> model


def _spec(action: argparse.Action) -> str:
    """What to offer for an action's value: ``@profile``, ``@dir``, ``@file``, ``@none`` or words."""
    explicit = getattr(action, "complete", None)
    if explicit in ("profile", "dir", "file", "none"):
        return f"@{explicit}"
    if action.choices:
        return " ".join(str(c) for c in action.choices)
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    if metavar == "PROFILE" or action.dest in _PROFILE_DESTS:
        return "@profile"
    if action.dest == "root" or metavar in _DIR_METAVARS:
        return "@dir"
    if metavar in _FILE_METAVARS or action.dest in _FILE_DESTS:
        return "@file"
    return "@none"


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


def build_model(parser: argparse.ArgumentParser, path: tuple[str, ...] = (), help_: str = "") -> Command:
    """The completion model of ``parser`` and, recursively, of its subcommands."""
    cmd = Command(path, _one_line(help_))
    index = 0
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                if name.startswith("_") or helps.get(name) == argparse.SUPPRESS:
                    continue
                cmd.subcommands[name] = build_model(sub, (*path, name), helps.get(name) or sub.description or "")
            continue
        if action.option_strings:
            value = "" if action.nargs == 0 else _spec(action)
            cmd.options.append(Option(tuple(action.option_strings), _one_line(action.help), value))
            continue
        nargs = action.nargs
        if nargs in ("*", "+", argparse.REMAINDER):
            cmd.positionals.append(Positional(_spec(action), index, None))
            index += 1_000  # nothing after a repeating positional is reachable by position
        else:
            count = nargs if isinstance(nargs, int) else 1
            cmd.positionals.append(Positional(_spec(action), index, index + count - 1))
            index += count
    return cmd


def _profile_rules() -> tuple[str, tuple[str, ...]]:
    from profiles.names import NAME_PATTERN, RESERVED_NAMES

    return NAME_PATTERN, tuple(sorted(RESERVED_NAMES))


# --------------------------------------------------------------------------- shared pieces


def _sq(text: str) -> str:
    """POSIX single-quoted word (bash and zsh)."""
    return "'" + text.replace("'", "'\\''") + "'"


def _fq(text: str) -> str:
    """fish single-quoted word."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _options_for(cmd: Command) -> list[str]:
    return [flag for opt in cmd.options for flag in opt.flags]


def _positional_chain(cmd: Command, n: str, fmt_cond: str) -> list[tuple[str, str]]:
    """(condition, spec) pairs for the positionals that offer something."""
    out = []
    for pos in cmd.positionals:
        if pos.spec == "@none":
            continue
        if pos.last is None:
            cond = fmt_cond.format(n=n, op=">=", i=pos.first)
        elif pos.first == pos.last:
            cond = fmt_cond.format(n=n, op="==", i=pos.first)
        else:
            cond = fmt_cond.format(n=n, op=">=", i=pos.first) + " && " + fmt_cond.format(n=n, op="<=", i=pos.last)
        out.append((cond, pos.spec))
    return out


HEADER = "{comment} {shell} completion for hermesd, generated by `hermesd completion {shell}` from its own parser.\n"


# --------------------------------------------------------------------------- bash


def render_bash(model: Command) -> str:
    pattern, reserved = _profile_rules()
    cmds = list(model.walk())
    lines = [HEADER.format(comment="#", shell="bash").rstrip(),
             "# Install: hermesd completion bash > ~/.local/share/bash-completion/completions/hermesd",
             "#      or: eval \"$(hermesd completion bash)\"   (in ~/.bashrc)",
             ""]
    lines += ["_hermesd_subcommands() {", '    case "$1" in']
    for c in cmds:
        if c.subcommands:
            lines.append(f"        {_sq(c.key)}) REPLY={_sq(' '.join(c.subcommands))} ;;")
    lines += ["        *) REPLY='' ;;", "    esac", "}", ""]
    lines += ["_hermesd_options() {", '    case "$1" in']
    for c in cmds:
        lines.append(f"        {_sq(c.key)}) REPLY={_sq(' '.join(_options_for(c)))} ;;")
    lines += ["        *) REPLY='' ;;", "    esac", "}", ""]
    lines += ["# REPLY: what the option's value completes to; empty when the option takes no value.",
              "_hermesd_option_value() {", '    case "$1|$2" in']
    for c in cmds:
        for opt in c.options:
            if opt.value:
                pats = "|".join(_sq(f"{c.key}|{f}") for f in opt.flags)
                lines.append(f"        {pats}) REPLY={_sq(opt.value)} ;;")
    lines += ["        *) REPLY='' ;;", "    esac", "}", ""]
    lines += ["_hermesd_positional() {", "    REPLY=''", '    case "$1" in']
    for c in cmds:
        chain = _positional_chain(c, "$2", "(( {n} {op} {i} ))")
        if chain:
            body = "; ".join(f"{'if' if k == 0 else 'elif'} {cond}; then REPLY={_sq(spec)}"
                             for k, (cond, spec) in enumerate(chain))
            lines.append(f"        {_sq(c.key)}) {body}; fi ;;")
    lines += ["    esac", "}", ""]
    lines += [
        "_hermesd_profiles() {",
        "    local root=$1 home parent d n",
        "    if [[ -z $root ]]; then",
        "        home=${HERMES_HOME:-}",
        "        home=${home%/}",
        '        if [[ -z $home || $home == "$HOME/.hermes" || $home == "$HOME/.hermes/"* ]]; then',
        '            root=$HOME/.hermes',
        "        else",
        "            parent=${home%/*}",
        '            if [[ ${parent##*/} == profiles ]]; then root=${parent%/*}; else root=$home; fi',
        "        fi",
        "    fi",
        "    REPLY=default",
        '    for d in "$root"/profiles/*; do',
        '        [[ -d $d && ! -L $d ]] || continue',
        "        n=${d##*/}",
        f"        [[ $n =~ {pattern} ]] || continue",
        f"        case $n in {'|'.join(reserved)}) continue ;; esac",
        '        REPLY+=" $n"',
        "    done",
        "}",
        "",
        "_hermesd_values() {  # $1: spec, $2: current word, $3: root",
        '    case "$1" in',
        '        @profile) _hermesd_profiles "$3"; COMPREPLY+=($(compgen -W "$REPLY" -- "$2")) ;;',
        '        @dir) compopt -o filenames 2>/dev/null; COMPREPLY+=($(compgen -d -- "$2")) ;;',
        '        @file) compopt -o filenames 2>/dev/null; COMPREPLY+=($(compgen -f -- "$2")) ;;',
        "        @none|'') ;;",
        '        *) COMPREPLY+=($(compgen -W "$1" -- "$2")) ;;',
        "    esac",
        "}",
        "",
        "_hermesd() {",
        '    local cur=${COMP_WORDS[COMP_CWORD]} cmdpath="" root="" npos=0 i=1 w spec',
        "    COMPREPLY=()",
        "    while (( i < COMP_CWORD )); do",
        "        w=${COMP_WORDS[i]}",
        "        if [[ $w == --*=* ]]; then",
        '            [[ ${w%%=*} == --root ]] && root=${w#*=}',
        "        elif [[ $w == -* ]]; then",
        '            _hermesd_option_value "$cmdpath" "$w"',
        '            if [[ -n $REPLY ]]; then',
        "                spec=$REPLY",
        "                [[ ${COMP_WORDS[i+1]-} == = ]] && (( i++ ))  # --opt=value is split at '='",
        "                (( i++ ))",
        "                if (( i >= COMP_CWORD )); then",
        '                    [[ $cur == = ]] && cur=""',
        '                    _hermesd_values "$spec" "$cur" "$root"',
        "                    return 0",
        "                fi",
        '                [[ $w == --root ]] && root=${COMP_WORDS[i]}',
        "            fi",
        "        else",
        '            _hermesd_subcommands "$cmdpath"',
        '            if [[ " $REPLY " == *" $w "* ]]; then',
        '                cmdpath=${cmdpath:+$cmdpath }$w',
        "                npos=0",
        "            else",
        "                (( npos++ ))",
        "            fi",
        "        fi",
        "        (( i++ ))",
        "    done",
        "    if [[ $cur == -* ]]; then",
        '        _hermesd_options "$cmdpath"',
        '        COMPREPLY=($(compgen -W "$REPLY" -- "$cur"))',
        "        return 0",
        "    fi",
        '    _hermesd_subcommands "$cmdpath"',
        '    COMPREPLY=($(compgen -W "$REPLY" -- "$cur"))',
        '    _hermesd_positional "$cmdpath" "$npos"',
        '    _hermesd_values "$REPLY" "$cur" "$root"',
        "    return 0",
        "}",
        "",
        "complete -F _hermesd hermesd",
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- zsh


def _zdesc(name: str, help_: str) -> str:
    return _sq(name.replace(":", "\\:") + (":" + help_ if help_ else ""))


def render_zsh(model: Command) -> str:
    pattern, reserved = _profile_rules()
    cmds = list(model.walk())
    lines = ["#compdef hermesd",
             HEADER.format(comment="#", shell="zsh").rstrip(),
             "# Install: hermesd completion zsh > \"${fpath[1]}/_hermesd\"   (then restart zsh)",
             "#      or: source <(hermesd completion zsh)   (in ~/.zshrc, after compinit)",
             ""]
    lines += ["_hermesd_subcommands() {", "    reply=()", '    case "$1" in']
    for c in cmds:
        if c.subcommands:
            entries = " ".join(_zdesc(n, s.help) for n, s in c.subcommands.items())
            lines.append(f"        {_sq(c.key)}) reply=({entries}) ;;")
    lines += ["    esac", "}", ""]
    lines += ["_hermesd_options() {", "    reply=()", '    case "$1" in']
    for c in cmds:
        entries = " ".join(_zdesc(f, o.help) for o in c.options for f in o.flags)
        lines.append(f"        {_sq(c.key)}) reply=({entries}) ;;")
    lines += ["    esac", "}", ""]
    lines += ["_hermesd_option_value() {", "    REPLY=''", '    case "$1|$2" in']
    for c in cmds:
        for opt in c.options:
            if opt.value:
                pats = "|".join(_sq(f"{c.key}|{f}") for f in opt.flags)
                lines.append(f"        {pats}) REPLY={_sq(opt.value)} ;;")
    lines += ["    esac", "}", ""]
    lines += ["_hermesd_positional() {", "    REPLY=''", '    case "$1" in']
    for c in cmds:
        chain = _positional_chain(c, "$2", "(( {n} {op} {i} ))")
        if chain:
            body = "; ".join(f"{'if' if k == 0 else 'elif'} {cond}; then REPLY={_sq(spec)}"
                             for k, (cond, spec) in enumerate(chain))
            lines.append(f"        {_sq(c.key)}) {body}; fi ;;")
    lines += ["    esac", "}", ""]
    lines += [
        "_hermesd_profiles() {",
        "    local root=$1 home parent d n",
        "    reply=(default)",
        "    if [[ -z $root ]]; then",
        "        home=${HERMES_HOME%/}",
        '        if [[ -z $home || $home == "$HOME/.hermes" || $home == "$HOME/.hermes/"* ]]; then',
        "            root=$HOME/.hermes",
        "        else",
        "            parent=${home%/*}",
        "            if [[ ${parent##*/} == profiles ]]; then root=${parent%/*}; else root=$home; fi",
        "        fi",
        "    fi",
        "    for d in $root/profiles/*(N/); do  # (/): real directories only, not symlinks",
        "        n=${d:t}",
        f"        [[ $n =~ {_sq(pattern)} ]] || continue",
        f"        case $n in ({'|'.join(reserved)}) continue ;; esac",
        "        reply+=($n)",
        "    done",
        "}",
        "",
        "_hermesd_values() {  # $1: spec, $2: root",
        '    case "$1" in',
        '        (@profile) local -a reply; _hermesd_profiles "$2"; compadd -- $reply ;;',
        "        (@dir) _directories ;;",
        "        (@file) _files ;;",
        "        (@none|'') ;;",
        "        (*) compadd -- ${=1} ;;",
        "    esac",
        "}",
        "",
        "_hermesd() {",
        "    local cur=${words[CURRENT]} cmdpath='' root='' spec w",
        "    local -i npos=0 i=2",
        "    local -a reply",
        "    while (( i < CURRENT )); do",
        "        w=${words[i]}",
        "        if [[ $w == -* ]]; then",
        "            if [[ $w == --*=* ]]; then",
        "                [[ ${w%%=*} == --root ]] && root=${w#*=}",
        "            else",
        '                _hermesd_option_value "$cmdpath" "$w"',
        "                if [[ -n $REPLY ]]; then",
        "                    spec=$REPLY",
        "                    (( i++ ))",
        "                    if (( i >= CURRENT )); then",
        '                        _hermesd_values "$spec" "$root"',
        "                        return",
        "                    fi",
        "                    [[ $w == --root ]] && root=${words[i]}",
        "                fi",
        "            fi",
        "        else",
        '            _hermesd_subcommands "$cmdpath"',
        "            if (( ${reply[(I)${w}(|:*)]} )); then",
        "                cmdpath=${cmdpath:+$cmdpath }$w",
        "                npos=0",
        "            else",
        "                (( npos++ ))",
        "            fi",
        "        fi",
        "        (( i++ ))",
        "    done",
        "    if [[ $cur == --*=* ]]; then",
        '        _hermesd_option_value "$cmdpath" "${cur%%=*}"',
        "        if [[ -n $REPLY ]]; then",
        "            spec=$REPLY",
        "            compset -P '*='",
        '            _hermesd_values "$spec" "$root"',
        "            return",
        "        fi",
        "    fi",
        "    if [[ $cur == -* ]]; then",
        '        _hermesd_options "$cmdpath"',
        "        _describe -t options 'option' reply",
        "        return",
        "    fi",
        '    _hermesd_subcommands "$cmdpath"',
        "    (( $#reply )) && _describe -t commands 'hermesd command' reply",
        '    _hermesd_positional "$cmdpath" $npos',
        '    _hermesd_values "$REPLY" "$root"',
        "}",
        "",
        "if [[ $funcstack[1] == _hermesd ]]; then",
        '    _hermesd "$@"  # autoloaded from fpath as _hermesd',
        "elif (( $+functions[compdef] )); then",
        "    compdef _hermesd hermesd  # sourced",
        "fi",
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- fish


def render_fish(model: Command) -> str:
    pattern, reserved = _profile_rules()
    cmds = list(model.walk())
    lines = [HEADER.format(comment="#", shell="fish").rstrip(),
             "# Install: hermesd completion fish > ~/.config/fish/completions/hermesd.fish",
             ""]

    def switch(name: str, args: str, arms: list[tuple[list[str], list[str]]], default: list[str] | None = None) -> None:
        lines.append(f"function {name} --argument-names {args}")
        lines.append(f'    switch "${args.split()[0]}"')
        for pats, body in arms:
            lines.append(f"        case {' '.join(_fq(p) for p in pats)}")
            lines.extend(f"            {b}" for b in body)
        if default is not None:
            lines.append("        case '*'")
            lines.extend(f"            {b}" for b in default)
        lines.extend(["    end", "end", ""])

    def printf_pairs(pairs: list[tuple[str, str]]) -> str:
        return "printf '%s\\t%s\\n' " + " ".join(f"{_fq(a)} {_fq(b)}" for a, b in pairs)

    switch("__hermesd_subcommands", "cmdpath", [
        ([c.key], [printf_pairs([(n, s.help) for n, s in c.subcommands.items()])]) for c in cmds if c.subcommands
    ])
    switch("__hermesd_options", "cmdpath", [
        ([c.key], [printf_pairs([(f, o.help) for o in c.options for f in o.flags])]) for c in cmds if c.options
    ])
    switch("__hermesd_option_value", "key", [
        ([f"{c.key}|{f}" for f in o.flags], [f"echo {_fq(o.value)}"]) for c in cmds for o in c.options if o.value
    ])
    arms = []
    for c in cmds:
        chain = _positional_chain(c, "$n", "{n} {op} {i}")
        if chain:
            body = []
            for k, (cond, spec) in enumerate(chain):
                tests = " -a ".join(_fish_test(part) for part in cond.split(" && "))
                body.append(f"{'if' if k == 0 else 'else if'} test {tests}")
                body.append(f"    echo {_fq(spec)}")
            body.append("end")
            arms.append(([c.key], body))
    switch("__hermesd_positional", "cmdpath n", arms)
    lines += [
        "function __hermesd_profiles --argument-names root",
        "    if test -z \"$root\"",
        "        set -l home (string replace -r '/+$' '' -- \"$HERMES_HOME\")",
        "        if test -z \"$home\"; or test \"$home\" = \"$HOME/.hermes\"",
        "            or string match -q -- \"$HOME/.hermes/*\" $home",
        "            set root $HOME/.hermes",
        "        else",
        "            set -l parent (string replace -r '/[^/]*$' '' -- $home)",
        "            if test (string replace -r '.*/' '' -- $parent) = profiles",
        "                set root (string replace -r '/[^/]*$' '' -- $parent)",
        "            else",
        "                set root $home",
        "            end",
        "        end",
        "    end",
        "    echo default",
        "    for d in $root/profiles/*",
        "        test -d $d; and not test -L $d; or continue",
        "        set -l n (string replace -r '.*/' '' -- $d)",
        f"        string match -qr {_fq(pattern)} -- $n; or continue",
        f"        contains -- $n {' '.join(reserved)}; and continue",
        "        echo $n",
        "    end",
        "end",
        "",
        "function __hermesd_values --argument-names spec cur root prefix",
        "    switch $spec",
        "        case @profile",
        "            __hermesd_profiles \"$root\" | string replace -r '^' -- \"$prefix\"",
        "        case @dir",
        "            __fish_complete_directories \"$cur\" | string replace -r '^' -- \"$prefix\"",
        "        case @file",
        "            __fish_complete_path \"$cur\" | string replace -r '^' -- \"$prefix\"",
        "        case @none ''",
        "        case '*'",
        "            string split ' ' -- $spec | string replace -r '^' -- \"$prefix\"",
        "    end",
        "end",
        "",
        "function __hermesd_complete",
        "    set -l tokens (commandline -opc)",
        "    set -l cur (commandline -ct)",
        "    set -l cmdpath ''",
        "    set -l root ''",
        "    set -l npos 0",
        "    set -l i 2",
        "    while test $i -le (count $tokens)",
        "        set -l w $tokens[$i]",
        "        if string match -q -- '--*=*' $w",
        "            string match -q -- '--root=*' $w; and set root (string replace -- '--root=' '' $w)",
        "        else if string match -q -- '-*' $w",
        "            set -l spec (__hermesd_option_value \"$cmdpath|$w\")",
        "            if test -n \"$spec\"",
        "                set i (math $i + 1)",
        "                if test $i -gt (count $tokens)",
        "                    __hermesd_values \"$spec\" \"$cur\" \"$root\" ''",
        "                    return",
        "                end",
        "                test $w = --root; and set root $tokens[$i]",
        "            end",
        "        else if contains -- $w (__hermesd_subcommands \"$cmdpath\" | string replace -r '\\t.*' '')",
        "            set cmdpath (string trim -- \"$cmdpath $w\")",
        "            set npos 0",
        "        else",
        "            set npos (math $npos + 1)",
        "        end",
        "        set i (math $i + 1)",
        "    end",
        "    if string match -q -- '--*=*' $cur",
        "        set -l flag (string replace -r '=.*' '' -- $cur)",
        "        set -l spec (__hermesd_option_value \"$cmdpath|$flag\")",
        "        if test -n \"$spec\"",
        "            __hermesd_values \"$spec\" (string replace -r '^[^=]*=' '' -- $cur) \"$root\" \"$flag=\"",
        "            return",
        "        end",
        "    end",
        "    if string match -q -- '-*' $cur",
        "        __hermesd_options \"$cmdpath\"",
        "        return",
        "    end",
        "    __hermesd_subcommands \"$cmdpath\"",
        "    set -l spec (__hermesd_positional \"$cmdpath\" $npos)",
        "    __hermesd_values \"$spec\" \"$cur\" \"$root\" ''",
        "end",
        "",
        "complete -c hermesd -e",
        "complete -c hermesd -f -a '(__hermesd_complete)'",
    ]
    return "\n".join(lines) + "\n"


def _fish_test(cond: str) -> str:
    n, op, i = cond.split()
    return f"{n} {'-eq' if op == '==' else '-ge' if op == '>=' else '-le'} {i}"


RENDERERS = {"bash": render_bash, "zsh": render_zsh, "fish": render_fish}


def generate(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for ``shell``, from ``parser`` (hermesd's own, handed down by ``main``)."""
    return RENDERERS[shell](build_model(parser))


# --------------------------------------------------------------------------- command line


def cmd_completion(args: argparse.Namespace) -> int:
    import sys

    sys.stdout.write(generate(args.shell, args.parser))
    return 0


HELP = "print a shell completion script (bash, zsh or fish) built from hermesd's own commands"
EPILOG = """\
install:
  bash  hermesd completion bash > ~/.local/share/bash-completion/completions/hermesd
  zsh   hermesd completion zsh > "${fpath[1]}/_hermesd"
  fish  hermesd completion fish > ~/.config/fish/completions/hermesd.fish

example:
  eval "$(hermesd completion bash)"
"""


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``hermesd completion SHELL`` to the CLI."""
    p = subparsers.add_parser("completion", help=HELP, description=HELP + ".", epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shell", choices=SHELLS, help="the shell to generate for")
    p.set_defaults(func=cmd_completion)
    return p
