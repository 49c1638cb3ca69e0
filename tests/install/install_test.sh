#!/usr/bin/env bash
# Installs memplan into a staging prefix (DESTDIR) or unpacks its Debian package (cpack), then
# runs the installed binary as a user would and checks the man page and the bash completion.
#   install_test.sh staging|package BUILD_DIR SOURCE_DIR
set -euo pipefail
mode=$1 build=$2 source=$3
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
fail() { echo "install_test: $*" >&2; exit 1; }

if [[ $mode == staging ]]; then
  DESTDIR="$stage" cmake --install "$build" --prefix /usr >/dev/null
else
  (cd "$stage" && cpack --config "$build/CPackConfig.cmake" -B "$stage/pkg" >/dev/null)
  deb=$(ls "$stage"/pkg/memplan_*.deb) || fail "cpack made no .deb"
  control=$(dpkg-deb --field "$deb" Package Version)  # not piped into grep -q: pipefail and SIGPIPE
  [[ $control == *"Package: memplan"* ]] || fail "bad control: $control"
  dpkg-deb -x "$deb" "$stage"
fi

bin="$stage/usr/bin/memplan"
[[ -x $bin ]] || fail "no $bin"
version=$("$bin" --version)
[[ $version == "memplan 0."* ]] || fail "--version: $version"
summary=$("$bin" simulate "$source/traces/resnet_tiny.json" --policy swap-all --json)
[[ $summary == *'"feasible": true'* ]] || fail "the installed binary does not simulate"
# The CUDA backend's module, when the build has one, is found beside the installed binary: without
# a GPU, --backend cuda says there is no device, not that the module cannot be loaded.
if [[ -e $build/lib/memplan/libmemplan_cuda.so ]]; then
  [[ -e $stage/usr/lib/memplan/libmemplan_cuda.so ]] || fail "no CUDA backend module installed"
  cuda=$("$bin" record mlp --batch 2 --backend cuda -o "$stage/r.json" 2>&1 || true)
  [[ $cuda != *"cannot load the CUDA backend"* ]] || fail "--backend cuda: $cuda"
fi

man="$stage/usr/share/man/man1/memplan.1"
[[ -s $man ]] || fail "no man page"
grep -q '^\.TH MEMPLAN 1' "$man" || fail "man page header"
for command in simulate compare search sweep zoo import validate record info; do
  grep -q "^\.SS memplan $command" "$man" || fail "man page lacks $command"
done
grep -q 'time\\-limit' "$man" || fail "man page lacks the flags"
grep -q '^\.SH EXAMPLES' "$man" || fail "man page lacks EXAMPLES"

completion="$stage/usr/share/bash-completion/completions/memplan"
[[ -s $completion ]] || fail "no bash completion"
words=$(bash -c "source '$completion'; COMP_WORDS=(memplan si); COMP_CWORD=1; _memplan; echo \${COMPREPLY[*]}")
[[ $words == simulate ]] || fail "completion of 'memplan si': '$words'"
words=$(bash -c "source '$completion'; COMP_WORDS=(memplan search --time); COMP_CWORD=2; _memplan; echo \${COMPREPLY[*]}")
[[ $words == --time-limit ]] || fail "completion of 'memplan search --time': '$words'"
# A flag's value: its words (a policy, a device), nothing for a size, file names for a file.
words=$(bash -c "source '$completion'; COMP_WORDS=(memplan simulate t.json --policy dt); COMP_CWORD=4; _memplan; echo \${COMPREPLY[*]}")
[[ $words == dtr ]] || fail "completion of 'memplan simulate t.json --policy dt': '$words'"
words=$(bash -c "source '$completion'; COMP_WORDS=(memplan zoo resnet50 --device a100-8); COMP_CWORD=4; _memplan; echo \${COMPREPLY[*]}")
[[ $words == a100-80gb ]] || fail "completion of 'memplan zoo resnet50 --device a100-8': '$words'"
words=$(bash -c "cd '$source'; source '$completion'; COMP_WORDS=(memplan simulate t.json --memory ''); COMP_CWORD=4; _memplan; echo \${COMPREPLY[*]}")
[[ -z $words ]] || fail "completion of 'memplan simulate t.json --memory': '$words'"
words=$(bash -c "cd '$source'; source '$completion'; COMP_WORDS=(memplan info trac); COMP_CWORD=2; _memplan; echo \${COMPREPLY[*]}")
[[ $words == traces ]] || fail "completion of 'memplan info trac': '$words'"
echo "install_test: $mode ok"
