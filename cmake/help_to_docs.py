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


def option_values(help_body):
    """For each option that takes a value, what completes it: a list of words (a CLI11 choice
    type `TEXT:{a,b}`, or a help text that says `one of: a, b, c`), None for a file (a plain
    TEXT), or [] for anything else (a size, a number, a duration: no file names)."""
    found = {}
    lines = help_body.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^\s+((?:-{1,2}[\w-]+,?)+) (\S+)(?: \.\.\.)?(?:\s+(.*))?$", line)
        if not m or not re.match(r"(TEXT|INT|UINT|FLOAT)\b", m.group(2)):
            continue  # a flag without a value (a word after it may be "Excludes:")
        # CLI11 puts the description on the next line when the option's column is full.
        for more in lines[i + 1:]:
            if not re.match(r"^ {20,}\S", more):
                break
            line += " " + more.strip()
        m = re.match(r"^\s+((?:-{1,2}[\w-]+,?)+) (\S+)(?: \.\.\.)?(?:\s+(.*))?$", line)
        kind, text = m.group(2), m.group(3) or ""
        choices = re.search(r"\{([^}]*)\}", kind)
        listed = re.search(r"one of: ([\w.+-]+(?:, [\w.+-]+)*)", text)
        if choices:
            words = choices.group(1).split(",")
        elif listed:
            words = listed.group(1).split(", ")
        elif kind == "TEXT":
            words = None
        else:
            words = []
        for flag in m.group(1).split(","):
            if flag:
                found[flag] = words
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
    lines += [".SH EXAMPLES", ".nf"] + ["\\&" + roff(line) for line in EXAMPLES] + [".fi"]
    return "\n".join(lines) + "\n"


# A first session, each line a command that runs as written from the source folder.
EXAMPLES = [
    "# a ResNet-50 step on a 16 GB V100 (in-core peak 20.87 GiB), modeled",
    "memplan zoo resnet50 --batch 256 --device v100-16gb -o r50.json",
    "memplan info r50.json",
    "# every policy at 12 GiB, then a plan better than theirs, and its timeline",
    "memplan compare r50.json --memory 12GiB",
    "memplan search r50.json --memory 12GiB -o plan.json",
    "memplan simulate r50.json --plan plan.json --timeline timeline.json",
    "# the same plan on another link; a grid of memories and links",
    "memplan simulate r50.json --plan plan.json --link nvlink2",
    "memplan sweep r50.json --memory 8GiB,12GiB --link pcie3,nvlink2 -o sweep.csv",
    "# a PyTorch profiler trace, and a step of your own model (python3 + torch)",
    "memplan import kineto worker0.pt.trace.json.gz -o step.json",
    "memplan capture torchvision:resnet18 --batch 32 -o r18.json",
    "# a plan run for real on the CPU, its gradients against the in-core step's",
    "memplan search traces/resnet_tiny.json --memory 20KiB -o tiny-plan.json",
    "memplan validate traces/resnet_tiny.json --plan tiny-plan.json --memory 20KiB --backend host",
]


def completion(memplan, commands):
    cases, values = [], []
    for name, _ in commands:
        body = help_text(memplan, name)
        words = " ".join(flags(body))
        if name == "import":
            body += help_text(memplan, "import", "kineto")
            words += " kineto " + " ".join(flags(help_text(memplan, "import", "kineto")))
        cases.append(f'    {name}) opts="{words}" ;;')
        for flag, completes in option_values(body).items():
            if completes is not None:
                values.append(f'    "{name} {flag}") COMPREPLY=($(compgen -W "{" ".join(completes)}" '
                              '-- "$cur")); return ;;')
    names = " ".join(n for n, _ in commands)
    return f"""# bash completion for memplan (generated from memplan --help)
_memplan() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} opts
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W "{names} --help --version" -- "$cur"))
    return
  fi
  # The value of a flag: its words, or nothing where it is no file (a size, a number).
  case "${{COMP_WORDS[1]}} ${{COMP_WORDS[COMP_CWORD-1]}}" in
{chr(10).join(values)}
  esac
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
