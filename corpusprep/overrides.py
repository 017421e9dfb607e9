"""The command line's overrides, checked before Hydra runs.

Hydra's own messages for a wrong override are several lines, and some of its advice does
harm: for `splt=0.8` it suggests `+splt=0.8`, which runs with a key nothing reads. Here
every mistake is one line naming the override at fault and a fix that works: an unknown
key (with `+` too) with the closest known ones, a key the chosen plugin does not take
(and which choice takes it), several values without -m, a launcher whose extra is not
installed, a setting that does nothing with the chosen format.
"""

from __future__ import annotations

import difflib
import importlib.util
import itertools
import os
import re
import shlex
from pathlib import Path
from typing import Any, NoReturn, Optional

from omegaconf import DictConfig, OmegaConf

from corpusprep._paths import config_dirs
from corpusprep.config import PLUGIN_GROUPS
from corpusprep.errors import UserError, given_override
from corpusprep.redact import is_secret_name, redact_override

GROUPS = ("dataset", "source", "tokenizer", "executor", "format")
# the functions of Hydra's override grammar (a value such as o(1) names none: quote it)
GRAMMAR_FUNCTIONS = ("choice", "range", "interval", "glob", "sort", "shuffle", "tag", "int",
                     "float", "str", "bool", "json_str", "extend_list")  # fmt: skip
NEEDED_GROUPS = GROUPS[1:]  # every run has one of each (a dataset preset is optional)
LAUNCHER_EXTRAS = {  # hydra/launcher=NAME: the module Hydra needs, and corpusprep's extra
    "joblib": ("hydra_plugins.hydra_joblib_launcher", "joblib"),
    "submitit_local": ("hydra_plugins.hydra_submitit_launcher", "submitit"),
    "submitit_slurm": ("hydra_plugins.hydra_submitit_launcher", "submitit"),
}


def check_overrides(args: list[str]) -> None:
    """Fail with one line if the overrides in args are wrong; nothing otherwise. Anything
    this check cannot judge (another config folder, an unexpected error) is left to Hydra."""
    try:
        parsed = _parse(args)
        if parsed is None:
            return
        overrides, multirun = parsed
        _check_sweeps(overrides, multirun)
        _check_deletions(overrides)
        _check_group_choices(overrides)
        _check_launchers(overrides)
    except UserError as e:
        _fail(str(e))
    except SystemExit:
        raise
    except Exception:
        return  # not a user mistake we know: Hydra's own message says where


def _fail(message: str) -> NoReturn:
    from corpusprep.app import fail

    fail(message)


def _hydra_args(args: list[str]) -> Any:
    """The command line as Hydra's own parser reads it (abbreviations included); a flag it
    does not take, or takes otherwise, is one line (argparse's own is its usage, 8 lines)."""
    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()

    def error(message: str) -> NoReturn:
        if re.search(r"invalid choice: '[^']*=", message):  # --info split=0.8
            message += "; put the overrides before the flags"
        raise UserError(f"{message}; python -m corpusprep --help lists the options")

    parser.error = error  # type: ignore[method-assign]
    ns, unknown = parser.parse_known_args(args)
    for arg in unknown:
        if arg.startswith("-"):
            raise UserError(
                f"{arg}: not an option; overrides take no dashes ({_meant(arg)}); "
                "python -m corpusprep --help lists the options"
            )
        raise UserError(f"{arg}: an override after a flag; put every override before the "
                        "flags (python -m corpusprep KEY=VALUE ... --cfg job)")  # fmt: skip
    if ns.experimental_rerun is not None:  # Hydra would unpickle the file it names
        raise UserError("--experimental-rerun: not taken (it unpickles a file, which runs the "
                        "code it names); run the command again with its overrides")  # fmt: skip
    if ns.help or ns.hydra_help:
        return ns  # Hydra prints a help before any other check
    if ns.resolve and not ns.cfg:  # Hydra's own check is a ValueError (or a traceback)
        raise UserError("--resolve: only with --cfg or --help (python -m corpusprep ... "
                        "--cfg job --resolve prints the config resolved)")  # fmt: skip
    given = [flag for flag in ("run", "multirun", "cfg", "info", "shell_completion")
             if getattr(ns, flag)]  # fmt: skip
    if len(given) > 1:  # Hydra's own check raises a ValueError: a traceback
        raise UserError(f"{' and '.join('--' + f.replace('_', '-') for f in given)}: give one "
                        "of them at a time (--cfg and --info print, and run nothing)")  # fmt: skip
    if ns.shell_completion:
        _check_completion(ns.overrides)
    return ns


def _check_completion(overrides: list[str]) -> None:
    """-sc install=SHELL, uninstall=SHELL or query=SHELL: Hydra listed its shells on lines of
    their own after a wrong one; a query is what the installed script runs, and typed by
    hand (no COMP_LINE) it was a KeyError traceback."""
    from hydra.core.plugins import Plugins
    from hydra.plugins.completion_plugin import CompletionPlugin

    commands = ("install", "uninstall", "query")
    if not any(o.partition("=")[0] in commands for o in overrides):
        typed = "".join(f" {o}" for o in overrides)
        raise UserError(f"-sc{typed}: give what to do, install=SHELL, uninstall=SHELL or "
                        "query=SHELL; to complete corpusprep in this shell: eval \"$(python -m "
                        "corpusprep -sc install=bash)\" (or zsh, fish)")  # fmt: skip
    for command, _, shell in (o.partition("=") for o in overrides):
        if command not in commands:
            continue
        shells = sorted(p.provides() for p in Plugins.instance().discover(CompletionPlugin))
        if shell not in shells:
            raise UserError(f"-sc {command}={shell}: no completion for that shell; the shells "
                            f"are {', '.join(shells)} (e.g. -sc {command}=bash)")  # fmt: skip
        if command == "query" and "COMP_LINE" not in os.environ:
            raise UserError(f"-sc query={shell}: what the installed completion runs as you "
                            "press Tab (the shell sets COMP_LINE); to install it: eval "
                            f"\"$(corpusprep -sc install={shell})\"")  # fmt: skip


FLAG_KEYS = ("force", "quiet", "dry_run")  # the true/false keys a user may write as --key


def _meant(flag: str) -> str:
    """The override a flag that is not one was meant as: --split=0.8 -> split=0.8,
    --dry-run -> dry_run=true."""
    name, equals, value = flag.lstrip("-").partition("=")
    name = name.replace("-", "_")
    if equals:
        return f"{name}={value}"
    return f"{name}=true" if name in FLAG_KEYS else "dataset=shakespeare_char split=0.8"


def completing(args: list[str]) -> bool:
    """The shell asks for completions (-sc query=...): whatever is typed so far may be
    half a key, and nothing may be printed but the completions."""
    try:
        return bool(_hydra_args(args).shell_completion)
    except (SystemExit, UserError):
        return False


def installing_completion(args: list[str]) -> bool:
    """-sc install=SHELL (or uninstall=): Hydra's script for the shell, named after the
    command it completes."""
    try:
        ns = _hydra_args(args)
    except (SystemExit, UserError):
        return False
    return bool(ns.shell_completion) and any(
        o.startswith(("install=", "uninstall=")) for o in ns.overrides
    )


def hydra_prints(args: list[str]) -> bool:
    """Whether the command line asks Hydra to print the config, its overrides or its help
    instead of running (--cfg, --info, --help, --hydra-help, --shell-completion; `--cf job`
    and `-cjob` too)."""
    try:
        ns = _hydra_args(args)
    except (SystemExit, UserError):  # not a command line Hydra takes: said already
        return False
    return bool(ns.cfg or ns.info or ns.help or ns.hydra_help or ns.shell_completion)


def _parse(args: list[str]) -> Optional[tuple[list[Any], bool]]:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    ns = _hydra_args(args)
    if ns.config_dir or ns.help or ns.hydra_help or ns.info or ns.config_path or ns.config_name:
        return None  # other config folders, or no run: Hydra knows best
    parser = OverridesParser.create()
    overrides = []
    for i, arg in enumerate(ns.overrides):  # one at a time: the message names the one at fault
        if "=" not in arg and not arg.startswith("~"):
            before = ns.overrides[i - 1] if i else ""
            raise UserError(_bare_word(arg, before, ns.overrides[i + 1 :]))
        try:
            overrides.append(parser.parse_override(arg))
        except HydraException as e:  # Hydra's reason, unless it could quote a secret
            reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
            reason = f" ({reason})" if reason and redact_override(arg) == arg else ""
            called = re.search(r"while evaluating '(\w+)\(", reason)
            key, _, value = arg.partition("=")
            if called and called.group(1) in GRAMMAR_FUNCTIONS:  # tag(a,0.8,0.9): quoting is
                fix = (  # no help, its arguments are wrong
                    f"give {called.group(1)}() the arguments Hydra's override grammar asks for "
                    "(https://hydra.cc/docs/advanced/override_grammar/extended/)"
                )
            elif reason and '"' not in value and "'" not in value:  # no secret: its own fix
                fix = f"""quote the value: '{key}="{value}"'"""
            else:
                fix = ("quote a value holding special characters, e.g. "
                       """'key="<|endoftext|>"' or 'source.url="https://h/x?a=1"'""")  # fmt: skip
            raise UserError(f"{arg}: cannot parse this override{reason}; {fix}") from None
    if any(o.key_or_group.startswith("hydra.searchpath") for o in overrides):
        return None
    return overrides, bool(ns.multirun)


def _bare_word(word: str, before: str = "", after: Optional[list[str]] = None) -> str:
    """What a word without "=" was probably meant as (Hydra: "missing EQUAL"); `before`,
    `after`: the words around it, for an override the shell cut at its spaces."""
    name = before.partition("=")[0]
    if "=" in before and (redact_override(before) != before or is_secret_name(name)):
        # a secret's value the shell cut (Authorization=Bearer TOKEN): no word of it is shown
        return (f"{name}=***: its value holds a space, where the shell cut it; put the whole "
                "override in single quotes")  # fmt: skip
    spaced = _spaced(word, before, after or [])
    if spaced:  # `split = 0.8`: a preset's name would be no answer
        spaces = "" if spaced.endswith("=VALUE") else " (one word, no spaces around =)"
        return f"{word}: not an override (key=value); did you mean {spaced}?{spaces}"
    if word in ("inspect", "load", "verify"):
        return (f"{word}: not a command of python -m corpusprep; read a folder back with "
                "python -m corpusprep.inspect DIR (--verify to check it)")  # fmt: skip
    if word in ("help", "version"):  # as `git help`: the flag
        return f"{word}: not a command; python -m corpusprep --{word} prints it"
    if word in ("prepare", "run", "python", "corpusprep"):
        return (f"{word}: not needed; python -m corpusprep takes overrides alone, e.g. "
                "python -m corpusprep dataset=shakespeare_char")  # fmt: skip
    options = available_options()
    meant = [f"{group}={word}" for group in GROUPS if word in options[group]]
    meant += [f"{word}=NAME (one of {', '.join(sorted(options[word]))})"] if word in GROUPS else []
    if not meant and Path(word).is_file():
        meant = [f"source=file source.path={word}"]
    key = before.lstrip("+~").partition("=")[0]
    if not meant and "=" in before and key not in GROUPS and not before.startswith("-"):
        # source.path=My Documents/a.txt, unquoted: one value the shell cut at its spaces
        rest = itertools.takewhile(lambda a: "=" not in a and not a.startswith("-"), after or [])
        joined = shlex.quote(" ".join([before, word, *rest]))
        return (f"{word}: not an override (key=value); did you mean {joined}? (quote a value "
                "holding spaces)")  # fmt: skip
    example = meant[0] if meant else "dataset=shakespeare_char"
    return f"{word}: not an override (key=value); did you mean {example}?"


def _spaced(word: str, before: str, after: list[str]) -> Optional[str]:
    """The override `split = 0.8`, `split =0.8`, `split= 0.8` or `split 0.8` meant, else None."""
    if before.endswith("=") and before.count("=") == 1:  # split= 0.8
        return before + word
    if after and after[0] == "=":  # split = 0.8
        return f"{word}={after[1] if len(after) > 1 else 'VALUE'}"
    if after and after[0].startswith("="):  # split =0.8
        return word + after[0]
    value = after[0] if after and "=" not in after[0] else None
    if word in GROUPS:  # dataset shakespeare_char; alone, the group's options are the answer
        return f"{word}={value}" if value in available_options()[word] else None
    if word in config_defaults() or word.split(".")[0] in GROUPS:  # a key, alone: split 0.8
        return f"{word}={value or 'VALUE'}"
    return None


def _check_sweeps(overrides: list[Any], multirun: bool) -> None:
    """`split=0.8,0.9` without -m: Hydra's three-option message; here, the fix."""
    if multirun:
        for o in overrides:
            _check_sweep_values(o, overrides)
        return
    for o in overrides:
        if o.is_sweep_override():
            line = redact_override(o.input_line)  # a secret header's value never shown
            key, raw = line.split("=", 1)
            quoted = f", or quote one value holding commas: '{key}=\"{raw}\"'"
            if re.match(r"\w+\(", raw):  # glob(ch*), range(1,3): no value was meant so
                quoted = ""
            raise UserError(
                f"{line}: several values make a sweep; add -m (python -m corpusprep "
                f"-m {line} ...){quoted}"
            )


def _as_typed(o: Any) -> str:
    """An override as the command line typed it: a job's checks see one value of a sweep
    (tokenizer.vocab_size=300), and advice quoting it would drop the sweep's others."""
    return given_override(o.key_or_group) or o.input_line


def _check_sweep_values(o: Any, overrides: list[Any]) -> None:
    """A sweep the basic sweeper cannot run: Hydra made its folder first, then said only
    that it does not take an interval; a range of no values made a sweep of no jobs."""
    from hydra.core.override_parser.types import IntervalSweep, RangeSweep

    value, line = o.value(), redact_override(o.input_line)
    key = line.split("=", 1)[0]
    optimizing = any(g.key_or_group == "hydra/sweeper" for g in overrides)
    if isinstance(value, IntervalSweep) and not optimizing:
        raise UserError(
            f"{line}: a range to search, which only an optimizing sweeper reads (hydra/"
            f"sweeper=optuna, with hydra-optuna-sweeper); list the values to run instead, e.g. "
            f"{key}={value.start},{value.end}"
        )
    if isinstance(value, RangeSweep) and not list(o.sweep_string_iterator()):
        raise UserError(
            f"{line}: makes no values, so the sweep would run no job; range(START,STOP) counts "
            f"from START up to before STOP, e.g. {key}=range(1,3) for 1 and 2"
        )


def _values(o: Any) -> list[Any]:
    from hydra.core.override_parser.types import ChoiceSweep

    value = o.value()
    return list(value.list) if isinstance(value, ChoiceSweep) else [value]


def _is_group_choice(o: Any) -> bool:
    return o.key_or_group in GROUPS and not o.is_delete() and not o.package


def available_options() -> dict[str, set[str]]:
    """The options of each group: corpusprep's configs and installed plugins'."""
    options: dict[str, set[str]] = {g: set() for g in GROUPS}
    for root in config_dirs():
        for group in GROUPS:
            folder = root / group
            if folder.is_dir():
                options[group].update(
                    f.name[: -len(".yaml")] for f in folder.iterdir() if f.name.endswith(".yaml")
                )
    return options


def _check_group_choices(overrides: list[Any]) -> None:
    """`tokenizer=nope`: one line naming the choices."""
    from hydra.core.override_parser.types import Glob

    available = None
    for o in filter(_is_group_choice, overrides):
        for v in _values(o):
            available = available or available_options()
            if isinstance(v, Glob):  # glob(shakespeare*): Hydra sweeps the options it matches
                if not v.filter(sorted(available[o.key_or_group])):
                    raise UserError(
                        f"{o.input_line}: matches no {o.key_or_group}; its options are "
                        f"{', '.join(sorted(available[o.key_or_group]))}"
                    )
                continue
            for name in v if isinstance(v, list) else [v]:  # [a,b]: several configs of it
                if isinstance(name, str) and name in available[o.key_or_group]:
                    continue
                shown = "null" if name is None else name  # (Hydra's own answer: a ValueError)
                raise UserError(
                    f"{o.key_or_group}={shown}: no such {o.key_or_group}; choose one of "
                    f"{', '.join(sorted(available[o.key_or_group]))}"
                )


def _check_deletions(overrides: list[Any]) -> None:
    """~tokenizer or ~split: what every run needs, removed. Hydra's answer was "Key
    'tokenizer' is not in struct"; the run's, "split=None: must be a number"."""
    for o in overrides:
        key = o.key_or_group
        if not o.is_delete() or o.package or "." in key or "/" in key:
            continue
        if key in NEEDED_GROUPS:
            options = ", ".join(sorted(available_options()[key]))
            raise UserError(f"~{key}: every run needs a {key}; choose another with "
                            f"{key}=NAME ({options})")  # fmt: skip
        default = config_defaults().get(key)
        if default is not None:  # (one null by default: Hydra says it is not there)
            raise UserError(f"~{key}: every run needs {key} ({key}={default} unless set); "
                            f"drop ~{key}, or set {key}=VALUE")  # fmt: skip


def config_defaults() -> dict[str, Any]:
    """The top-level keys of corpusprep's config.yaml, as written (${...} unresolved)."""
    node = OmegaConf.create(config_dirs(plugins=False)[0].joinpath("config.yaml").read_text())
    values = OmegaConf.to_container(node, resolve=False)
    return {k: v for k, v in values.items() if k not in ("defaults", "hydra")}


def _check_launchers(overrides: list[Any]) -> None:
    """hydra/launcher=joblib without its plugin: the pip command, not Hydra's listing."""
    for o in overrides:
        if o.key_or_group != "hydra/launcher":
            continue
        for name in _values(o):
            module, extra = LAUNCHER_EXTRAS.get(str(name), (None, None))
            if module and importlib.util.find_spec(module) is None:
                raise UserError(
                    f"hydra/launcher={name}: Hydra's {name} launcher is not installed; "
                    f"pip install 'corpusprep[{extra}]'"
                )
            # without psutil, loky stops its workers with `pgrep -P`: a Ctrl-C reaching that
            # pgrep too (the terminal's process group) left the sweep waiting for ever
            if name == "joblib" and importlib.util.find_spec("psutil") is None:
                raise UserError(
                    "hydra/launcher=joblib: psutil is not installed (without it, a Ctrl-C can "
                    "leave the sweep hanging); pip install 'corpusprep[joblib]'"
                )


def _is_key(o: Any) -> bool:
    key = o.key_or_group
    return not (
        "/" in key or key == "hydra" or key.startswith("hydra.") or key in GROUPS or o.package
    )


def guard_key_overrides() -> None:
    """Check every key override against the config it changes, composed with the same group
    choices (a preset's too) just before Hydra applies it: inside Hydra's composition, so
    the config is composed once, for a plain run and for each job of a sweep."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    apply = ConfigLoaderImpl._apply_overrides_to_config
    if getattr(apply, "_corpusprep_guard", False):
        return

    def checked(overrides: list[Any], cfg: DictConfig) -> None:
        # a group whose _target_ the command line changes takes other keys: config.build
        # judges that class (and whether it may be made at all)
        retargeted = {o.key_or_group.split(".")[0] for o in overrides
                      if o.key_or_group.endswith("._target_")}  # fmt: skip
        try:
            for o in overrides:
                head = o.key_or_group.split(".")[0]
                if _is_key(o) and not o.is_delete() and head not in retargeted:
                    _check_key(o, cfg, overrides)
        except UserError as e:
            _fail(str(e))
        apply(overrides, cfg)

    checked._corpusprep_guard = True  # type: ignore[attr-defined]
    ConfigLoaderImpl._apply_overrides_to_config = staticmethod(checked)  # type: ignore[method-assign]
    _remember_choices()


# group -> option, as Hydra chose them for the config it composed last (it sets the config's
# hydra.runtime.choices only after the key overrides are applied, and checked here)
_CHOSEN: dict[str, Optional[str]] = {}


def _remember_choices() -> None:
    from hydra._internal import config_loader_impl

    make = config_loader_impl.create_defaults_list

    def remembering(*args: Any, **kw: Any) -> Any:
        found = make(*args, **kw)
        _CHOSEN.clear()
        _CHOSEN.update(found.overrides.known_choices)
        return found

    config_loader_impl.create_defaults_list = remembering


def _check_key(o: Any, cfg: DictConfig, overrides: list[Any]) -> None:
    key, line = o.key_or_group, _as_typed(o)
    head, *rest = key.split(".")
    if head in PLUGIN_GROUPS and rest and isinstance(cfg.get(head), DictConfig):
        _check_plugin_key(o, cfg[head], head, rest[0], nested=len(rest) > 1, given=overrides)
        return
    top = [k for k in cfg if k != "hydra" and k not in PLUGIN_GROUPS]
    if head in top and not rest:
        if o.is_add():
            raise UserError(f"{line}: {key} is a key already; set it without +: {line[1:]}")
        if key == "shard_tokens":
            _check_shard_tokens(cfg)
        return
    known = top + [f"{g}.{k}" for g in PLUGIN_GROUPS if g in cfg for k in _settable(cfg[g])]
    raise UserError(_unknown(key, "no such key", _closest(key, known)))


def choice_name(group: str, node: DictConfig) -> str:
    """The option of a group a composed node comes from, for messages: as Hydra chose it
    for the config it composed last in this process, else the shipped option whose class
    the node has (a --config-dir's option of a shipped class would be named by that one)."""
    if _CHOSEN.get(group):
        return str(_CHOSEN[group])
    target = node.get("_target_")
    for name in sorted(available_options()[group]):
        option = _option_node(group, name)
        if option is not None and option.get("_target_") == target:
            return name
    return str(target).rsplit(".", 1)[-1]  # a class of no shipped option: its name


def _option_node(group: str, name: str) -> Optional[DictConfig]:
    for root in config_dirs():
        file = root / group / f"{name}.yaml"
        if file.is_file():
            node = OmegaConf.create(file.read_text("utf-8"))
            node = node if "_target_" in node else node.get(group)  # a global package
            return node if isinstance(node, DictConfig) else None
    return None


def _settable(node: DictConfig) -> list[str]:
    """The keys of a plugin node a user may set: what its class takes (and `name`)."""
    taken = _taken(node)
    keys = list(node)  # _target_ too: config.build checks what it names
    return keys if taken is None else [k for k in keys if k in taken or k in ("name", "_target_")]


def _taken(node: Any) -> Optional[set[str]]:
    from corpusprep.config import accepted_keys, locate

    target = node.get("_target_") if isinstance(node, DictConfig) else None
    if not target:
        return None
    try:
        return accepted_keys(locate(target, "plugin"))
    except UserError:
        return None  # an untrusted or broken _target_: the run refuses it, in one line


def _check_plugin_key(o: Any, node: DictConfig, group: str, sub: str, nested: bool,
                      given: list[Any]) -> None:  # fmt: skip
    key, line = o.key_or_group, _as_typed(o)
    settable = _settable(node)
    if sub in settable or sub in (_taken(node) or ()):
        if nested:  # executor.slurm.account: Hydra judges the keys inside
            return
        in_config = sub in node.keys()  # noqa: SIM118 (`in` misses a "???" value)
        if o.is_add() and in_config:
            raise UserError(f"{line}: {key} is a key already; set it without +: {line[1:]}")
        if not in_config and not (o.is_add() or o.is_force_add()):
            raise UserError(
                f"{key}: {group}={choice_name(group, node)} takes {sub} but its config does "
                f"not list it; add it with +{line}"
            )
        return
    choice = choice_name(group, node)  # only now: it reads every option's config file
    others = _choices_taking(group, sub)
    if others:
        takers = " or ".join(f"{group}={c}" for c in others)
        # a key given that this choice takes and the other does not: adding the other
        # choice alone would fail on it (source=file source.path=a source.glob=b)
        mine, theirs = _taken(node) or set(), _taken(_option_node(group, others[0])) or set()
        clash = next((g for g in given if g.key_or_group.startswith(f"{group}.")
                      and g.key_or_group.split(".")[1] in mine - theirs), None)  # fmt: skip
        if clash is not None:
            leaf, typed = clash.key_or_group.split(".")[1], _as_typed(clash)
            raise UserError(
                f"{key}: {group}={choice} does not take {sub} ({takers} does), and "
                f"{group}={others[0]} does not take {leaf}: drop {line} to read {typed}, or "
                f"drop {typed} and add {group}={others[0]} before {line}"
            )
        raise UserError(
            f"{key}: {group}={choice} does not take {sub}; {takers} does: add {group}="
            f"{others[0]} before {line}"
        )
    known = [f"{group}.{k}" for k in settable]
    advice = _closest(key, known)
    near = _close_elsewhere(group, sub) if not advice.startswith("did you mean") else None
    if near:  # source.pth=x with the default source=url: source=file's path was meant
        taker, leaf = near
        advice = (f"did you mean {group}.{leaf}? {group}={taker} takes it: add {group}={taker} "
                  f"before {group}.{leaf}={line.partition('=')[2]}")  # fmt: skip
    raise UserError(_unknown(key, f"{group}={choice} has no such key", advice))


def check_file_key(group: str, node: DictConfig, sub: str) -> None:
    """A key of a group's node that its class does not take, set by a config file (a preset
    for another option of the group: `dataset=shakespeare tokenizer=char`, dropped then). If
    no option of the group takes it, it is a misspelling (encodng: cl100k_base in a file of
    one's own), which dropping would hide: one line naming it and the key meant. Only a near
    miss of a key the class takes: an option of a --config-dir may take any other."""
    takes = sorted(_taken(node) or _settable(node))  # the class's, listed in the file or not
    if not difflib.get_close_matches(sub, takes, n=1, cutoff=0.7):
        return  # not a near miss: an option's of a --config-dir (whose options we cannot list)
    if _choices_taking(group, sub):
        return
    key, choice = f"{group}.{sub}", choice_name(group, node)
    what = f"set in a config file (a preset or --config-dir), but {group}={choice} has no such key"
    raise UserError(_unknown(key, what, _closest(key, [f"{group}.{k}" for k in takes])))


def check_file_top_keys(cfg: DictConfig, known: list[str]) -> None:
    """A top-level key corpusprep does not have, set by a config file (the command line's are
    refused before Hydra runs): close to one it has and read by no ${...}, a misspelling
    (splitt: 0.5 left split as it was); else a helper value of one's own, kept."""
    what = "set in a config file (a preset or --config-dir), but there is no such key"
    raw = None  # the config as written, to find ${...} that name a key (read once, if needed)
    for key in cfg:
        if key in known or key == "hydra":
            continue
        close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.7)
        if close:
            raw = raw if raw is not None else str(OmegaConf.to_container(cfg, resolve=False))
            if re.search(r"\$\{[^}]*(?<![\w.])" + re.escape(str(key)) + r"(?!\w)", raw):
                continue  # a helper value an interpolation reads (root_dir: for out_dir)
            raise UserError(_unknown(str(key), what, f"did you mean {close[0]}?"))


def _close_elsewhere(group: str, sub: str) -> Optional[tuple[str, str]]:
    """The option of a group taking the key closest to a misspelt `sub`, and that key."""
    takers: dict[str, str] = {}
    for name in sorted(available_options()[group]):
        for taken in sorted(_taken(_option_node(group, name)) or ()):
            takers.setdefault(taken, name)
    close = difflib.get_close_matches(sub, list(takers), n=1, cutoff=0.7)
    return (takers[close[0]], close[0]) if close else None


def _choices_taking(group: str, sub: str) -> list[str]:
    """The options of a group whose class takes `sub` (source.path: file)."""
    found = []
    for name in sorted(available_options()[group]):
        taken = _taken(_option_node(group, name))
        if taken is not None and sub in taken:
            found.append(name)
    return found


def _check_shard_tokens(cfg: DictConfig) -> None:
    """shard_tokens shapes only a sharded format's files: with another it would do nothing."""
    taken = _taken(cfg.get("format"))
    if taken is not None and "shard_tokens" not in taken:
        fmt = choice_name("format", cfg.format)
        sharded = " or ".join(f"format={c}" for c in _choices_taking("format", "shard_tokens"))
        raise UserError(
            f"shard_tokens: format={fmt} writes one file per split, not shards, so it would "
            f"do nothing; use {sharded or 'a sharded format'} (e.g. format=llmc shard_tokens=N)"
        )


def _unknown(key: str, what: str, advice: str) -> str:
    """ "KEY: WHAT; ADVICE", unless KEY looks like a secret's name (token=char): the redactor
    hides what follows "token:" in any message, so it is said "WHAT: KEY; ADVICE"."""
    if is_secret_name(key.rpartition(".")[2]):
        return f"{what}: {key}; {advice}"
    return f"{key}: {what}; {advice}"


def _closest(key: str, known: list[str]) -> str:
    """The known keys closest to a misspelt one: within its group when it names one; a
    misspelt group (datset=, tokenizr=bpe, tokenizr.vocab_size=512) among the groups."""
    known = [k for k in known if not k.endswith("._target_")]  # not a key to advise
    head, _, last = key.rpartition(".")
    groups = sorted({k.split(".")[0] for k in known if "." in k})
    if head and "." not in head and not any(k.startswith(head + ".") for k in known):
        near = difflib.get_close_matches(head, groups, n=1, cutoff=0.7)
        if near:
            return _in_group(near[0], last, known)
    pool = {k.rpartition(".")[2]: k for k in known if k.rpartition(".")[0] == head}
    if "." in head and not pool:  # source.foo.bar: what source takes
        pool = {k.rpartition(".")[2]: k for k in known if k.startswith(head.split(".")[0] + ".")}
    if not head:  # a group is chosen as a key is set: tokenizer=bpe, dataset=NAME
        pool.update({g: g for g in [*groups, "dataset"]})
    close = [pool[m] for m in difflib.get_close_matches(last, list(pool), n=3, cutoff=0.7)]
    if close:
        return f"did you mean {' or '.join(close)}?"
    if head and pool:
        return f"its keys are {', '.join(sorted(pool))}"
    tops = sorted(k for k in known if "." not in k)
    tops = sorted([*tops, "dataset"]) if tops else tops  # the top level: presets too
    return (
        f"the keys are {', '.join(tops + [g + '.*' for g in groups])} (python -m corpusprep --help)"
    )


def _in_group(group: str, leaf: str, known: list[str]) -> str:
    """The advice for GROUP.LEAF typed with the group misspelt: that key if some option of
    the group takes it, else the closest key of the group as chosen, else its keys."""
    if f"{group}.{leaf}" in known or _choices_taking(group, leaf):
        return f"did you mean {group}.{leaf}?"
    keys = sorted(k.rpartition(".")[2] for k in known if k.startswith(group + "."))
    close = difflib.get_close_matches(leaf, keys, n=1, cutoff=0.7)
    if close:
        return f"did you mean {group}.{close[0]}?"
    return f"did you mean {group}? its keys are {', '.join(keys)}"
