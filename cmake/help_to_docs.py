#!/usr/bin/env python3
"""Writes memplan's man page and bash completion from its --help, so that both say exactly
what the binary accepts. Run by the build (cmake/Install.cmake):
    help_to_docs.py MEMPLAN VERSION OUT.1 OUT.bash
"""
import re
import subprocess
import sys


def help_text(memplan, *args):
    return subprocess.run([memplan, *args, "--help"], check=True, capture_output=True,
                          text=True).stdout


def subcommands(top_help):
    """Names and summaries of the Subcommands: section of the top-level help."""
    out, inside = [], False
    for line in top_help.splitlines():
        if line.startswith("Subcommands:"):
            inside = True
            continue
        if inside:
            m = re.match(r"^  (\S+)\s+(.*)$", line)
            if m:
                out.append((m.group(1), m.group(2)))
            elif line.strip() == "":
                break
    return out


def flags(help_body):
    """Every --long and -s flag a command's help lists."""
    found = []
    for line in help_body.splitlines():
        m = re.match(r"^\s+((?:-{1,2}[\w-]+,?)+)", line)
        if m:
            found += [f for f in m.group(1).split(",") if f]
    return found


def roff(text):
    return text.replace("\\", "\\e").replace("-", "\\-")


def man_page(memplan, version, top, commands):
    lines = [f'.TH MEMPLAN 1 "" "memplan {version}" "User Commands"',
             ".SH NAME", "memplan \\- " + roff(top.splitlines()[0].split(": ", 1)[-1]),
             ".SH SYNOPSIS", ".B memplan", "\\fICOMMAND\\fR [\\fIOPTIONS\\fR]",
             ".SH DESCRIPTION",
             roff("Exit status: 0 success; 1 an expected negative outcome (a plan that does not "
                  "fit); 2 bad input (a trace, a plan, a flag); 3 an internal error. Sizes, "
                  "bandwidths and times take units (16GiB, 12.5GB/s, 100Gb/s, 10us; see the "
                  "README's Units)."),
             ".SH COMMANDS"]
    for name, summary in commands:
        lines += [".SS " + roff(f"memplan {name}"), roff(summary), ".PP", ".nf"]
        body = help_text(memplan, name).split("\n", 1)[1]
        lines += ["\\&" + roff(line) for line in body.rstrip().splitlines()]
        lines += [".fi"]
    return "\n".join(lines) + "\n"


def completion(memplan, commands):
    cases = []
    for name, _ in commands:
        words = " ".join(flags(help_text(memplan, name)))
        if name == "import":
            words += " kineto " + " ".join(flags(help_text(memplan, "import", "kineto")))
        cases.append(f'    {name}) opts="{words}" ;;')
    names = " ".join(n for n, _ in commands)
    return f"""# bash completion for memplan (generated from memplan --help)
_memplan() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} opts
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W "{names} --help --version" -- "$cur"))
    return
  fi
  case ${{COMP_WORDS[1]}} in
{chr(10).join(cases)}
    *) opts="" ;;
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}}
complete -o filenames -F _memplan memplan
"""


def main():
    memplan, version, man_out, bash_out = sys.argv[1:5]
    top = help_text(memplan)
    commands = subcommands(top)
    if not commands:
        sys.exit("help_to_docs.py: no subcommands in memplan --help")
    with open(man_out, "w") as f:
        f.write(man_page(memplan, version, top, commands))
    with open(bash_out, "w") as f:
        f.write(completion(memplan, commands))


if __name__ == "__main__":
    main()
